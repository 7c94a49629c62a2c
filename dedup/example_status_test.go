package dedup_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
)

// Status answers "did this job run?" by key or by the asynq task id an
// operator copied from the dashboard, in one vocabulary: unknown, pending,
// running, done (with the stored result) and so on.
func ExampleProducer_Status() {
	rdb := redistest.Shared() // your Redis: redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	producer, err := dedup.NewProducer(rdb, nil, dedup.ProducerOptions{})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	invoices := dedup.Define(dedup.Spec[Invoice]{Type: "invoice:send", ID: func(i Invoice) string { return i.ID }})
	job := invoices.Job(Invoice{ID: "inv-1", Amount: 4200})
	key, _ := dedup.ParseKey("invoice:send=inv~1") // job.Key, as its task id
	show := func() {
		st, err := producer.Status(ctx, key)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s: %s, known %v, attempts %d", st.Key, st.State, st.Known, st.Attempts)
		if st.Processed {
			fmt.Printf(", result %s", st.Result)
		}
		fmt.Println()
	}
	show()
	if _, err := producer.Enqueue(ctx, job); err != nil {
		panic(err)
	}
	show()

	srv, _ := dedup.NewServer(rdb, nil, asynq.Config{}, dedup.MiddlewareOptions{})
	if err := srv.Start(dedup.Handle(invoices, func(ctx context.Context, i Invoice) (map[string]string, error) {
		return map[string]string{"message_id": "<" + i.ID + "@example.com>"}, nil
	})); err != nil {
		panic(err)
	}
	defer srv.Shutdown(ctx)
	if _, err := producer.Wait(ctx, job, 10*time.Second); err != nil {
		panic(err)
	}
	show()
	// Output:
	// invoice:send/inv-1: unknown, known false, attempts 0
	// invoice:send/inv-1: pending, known true, attempts 0
	// invoice:send/inv-1: done, known true, attempts 1, result {"message_id":"<inv-1@example.com>"}
}

// Wait blocks until the job is done or failed for good, or the timeout ends
// (then the status says where the job is). Once it is done, a repeat is not
// run again: the duplicate carries the stored result.
func ExampleProducer_Wait() {
	rdb := redistest.Shared() // your Redis: redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	producer, err := dedup.NewProducer(rdb, nil, dedup.ProducerOptions{})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	invoices := dedup.Define(dedup.Spec[Invoice]{Type: "invoice:send", ID: func(i Invoice) string { return i.ID }})
	job := invoices.Job(Invoice{ID: "inv-1", Amount: 4200})
	if _, err := producer.Enqueue(ctx, job); err != nil {
		panic(err)
	}
	st, _ := producer.Wait(ctx, job, 50*time.Millisecond) // no worker yet
	fmt.Println("no worker:", st.State)

	srv, _ := dedup.NewServer(rdb, nil, asynq.Config{}, dedup.MiddlewareOptions{})
	if err := srv.Start(dedup.Handle(invoices, func(ctx context.Context, i Invoice) (string, error) {
		fmt.Println("sending", i.ID)
		return "sent " + i.ID, nil
	})); err != nil {
		panic(err)
	}
	defer srv.Shutdown(ctx)
	st, _ = producer.Wait(ctx, job, 10*time.Second)
	fmt.Printf("worker: %s %s\n", st.State, st.Result)

	out, _ := producer.Enqueue(ctx, job)
	fmt.Printf("repeat: %s (%s) %s\n", out.Decision, out.State, out.Result)
	// Output:
	// no worker: pending
	// sending inv-1
	// worker: done "sent inv-1"
	// repeat: duplicate (done) "sent inv-1"
}
