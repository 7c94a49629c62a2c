package onceq_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq"
)

// Reminder has no business id: its key is the SHA-256 of its canonical JSON,
// without the volatile trace id.
type Reminder struct {
	To      string `json:"to"`
	Text    string `json:"text"`
	TraceID string `json:"trace_id,omitempty" dedup:"volatile"`
}

// Jobs from JSON (an HTTP body, a batch line) go through the catalog: strict
// decoding, validation and the key rule, as Typed.Job applies them to Go
// values. Key order, whitespace and volatile fields do not make another
// job: both bodies have the key "~" + the hex SHA-256 of
// {"text":"Standup at 10","to":"ada@example.com"}. An unknown field is
// refused before anything is enqueued.
func ExampleCatalog_Build() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	producer := onceq.NewProducer(rdb, nil, onceq.ProducerOptions{})
	ctx := context.Background()

	reminders := onceq.Define(onceq.Spec[Reminder]{Type: "reminder:send"})
	catalog, _ := onceq.NewCatalog(reminders.Kind)
	for _, body := range []string{
		`{"to":"ada@example.com","text":"Standup at 10","trace_id":"t-1"}`,
		`{ "text": "Standup at 10", "to": "ada@example.com", "trace_id": "t-2" }`,
	} {
		job, err := catalog.Build("reminder:send", []byte(body), "", "")
		if err != nil {
			panic(err)
		}
		out, err := producer.Enqueue(ctx, job)
		if err != nil {
			panic(err)
		}
		fmt.Println(out.Decision, out.Key)
	}
	_, err := catalog.Build("reminder:send", []byte(`{"to":"ada@example.com","txt":"typo"}`), "", "")
	fmt.Println(errors.Is(err, onceq.ErrMalformed))
	// Output:
	// enqueued reminder:send/~edab2ec2862f94cd49e7c6fd5c7526cdcfbebf08cefd3e0d554ba83d2009ff62
	// duplicate reminder:send/~edab2ec2862f94cd49e7c6fd5c7526cdcfbebf08cefd3e0d554ba83d2009ff62
	// true
}

// One catalog for producer and worker: a task that plain asynq code enqueued,
// without onceq, gets at the worker the key its Spec gives it (here the
// invoice id, not a content hash), so a later Enqueue of the same invoice
// through the Producer is a duplicate of it, answered with its result.
func ExampleCatalog() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	ctx := context.Background()

	invoices := onceq.Define(onceq.Spec[Invoice]{Type: "invoice:send", ID: func(i Invoice) string { return i.ID }})
	catalog, _ := onceq.NewCatalog(invoices.Kind)
	srv, _ := onceq.NewServer(rdb, nil, asynq.Config{}, onceq.MiddlewareOptions{Catalog: catalog})
	mux := asynq.NewServeMux()
	mux.Handle(invoices.Type, onceq.Handle(invoices, func(ctx context.Context, i Invoice) (string, error) {
		run, _ := onceq.RunFromContext(ctx)
		fmt.Println("sending", i.ID, "under", run.Key)
		return "sent", nil
	}))
	if err := srv.Start(mux); err != nil {
		panic(err)
	}
	defer srv.Shutdown(ctx)

	// Another service, on plain asynq.
	client := asynq.NewClientFromRedisClient(rdb)
	if _, err := client.Enqueue(asynq.NewTask("invoice:send", []byte(`{"amount":4200,"id":"inv-7"}`))); err != nil {
		panic(err)
	}

	producer := onceq.NewProducer(rdb, nil, onceq.ProducerOptions{})
	job := invoices.Job(Invoice{ID: "inv-7", Amount: 4200})
	st, _ := producer.Wait(ctx, job, 10*time.Second)
	out, _ := producer.Enqueue(ctx, job)
	fmt.Printf("%s; %s %s\n", st.State, out.Decision, out.Result)
	// Output:
	// sending inv-7 under invoice:send/inv-7
	// done; duplicate "sent"
}
