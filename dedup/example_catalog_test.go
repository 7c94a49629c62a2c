package dedup_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
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
// refused before anything is enqueued, the error naming the fields there are.
func ExampleCatalog_Build() {
	rdb := redistest.Shared() // your Redis: redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	producer, err := dedup.NewProducer(rdb, nil, dedup.ProducerOptions{})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	reminders := dedup.Define(dedup.Spec[Reminder]{Type: "reminder:send"})
	catalog, _ := dedup.NewCatalog(reminders.Kind)
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
	_, err = catalog.Build("reminder:send", []byte(`{"to":"ada@example.com","txt":"typo"}`), "", "")
	fmt.Println(errors.Is(err, dedup.ErrMalformed))
	fmt.Println(err)
	// Output:
	// enqueued reminder:send/~edab2ec2862f94cd49e7c6fd5c7526cdcfbebf08cefd3e0d554ba83d2009ff62
	// duplicate reminder:send/~edab2ec2862f94cd49e7c6fd5c7526cdcfbebf08cefd3e0d554ba83d2009ff62
	// true
	// onceq: reminder:send: invalid payload: malformed JSON: json: cannot unmarshal JSON string into Go dedup_test.Reminder: unknown object member name "txt"; accepted: to, text, trace_id
}

// One catalog for producer and worker: a task that plain asynq code enqueued,
// without onceq, gets at the worker the key its Spec gives it (here the
// invoice id, not a content hash), so a later Enqueue of the same invoice
// through the Producer is a duplicate of it, answered with its result.
func ExampleCatalog() {
	rdb := redistest.Shared() // your Redis: redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	ctx := context.Background()

	invoices := dedup.Define(dedup.Spec[Invoice]{Type: "invoice:send", ID: func(i Invoice) string { return i.ID }})
	catalog, _ := dedup.NewCatalog(invoices.Kind)
	srv, _ := dedup.NewServer(rdb, nil, asynq.Config{}, dedup.MiddlewareOptions{Catalog: catalog})
	mux := asynq.NewServeMux()
	mux.Handle(invoices.Type, dedup.Handle(invoices, func(ctx context.Context, i Invoice) (string, error) {
		run, _ := dedup.RunFromContext(ctx)
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

	producer, err := dedup.NewProducer(rdb, nil, dedup.ProducerOptions{})
	if err != nil {
		log.Fatal(err)
	}
	job := invoices.Job(Invoice{ID: "inv-7", Amount: 4200})
	st, _ := producer.Wait(ctx, job, 10*time.Second)
	out, _ := producer.Enqueue(ctx, job)
	fmt.Printf("%s; %s %s\n", st.State, out.Decision, out.Result)
	// Output:
	// sending inv-7 under invoice:send/inv-7
	// done; duplicate "sent"
}
