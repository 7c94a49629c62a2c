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

// Under the replace policy a repeat with other content takes the place of
// the job while it waits in the queue; the replaced job never runs. Once the
// job has run, other content is a conflict again.
func ExampleRepeat() {
	rdb := redistest.Shared() // your Redis: redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	producer, err := dedup.NewProducer(rdb, nil, dedup.ProducerOptions{})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	invoices := dedup.Define(dedup.Spec[Invoice]{
		Type:   "invoice:send",
		ID:     func(i Invoice) string { return i.ID },
		Repeat: dedup.Repeat{Policy: "replace"},
	})
	enqueue := func(i Invoice) dedup.Job {
		job := invoices.Job(i)
		out, err := producer.Enqueue(ctx, job)
		if err != nil {
			panic(err)
		}
		fmt.Printf("amount %d: %s, replaced %v\n", i.Amount, out.Decision, out.Replaced)
		return job
	}
	enqueue(Invoice{ID: "inv-1", Amount: 4200})
	job := enqueue(Invoice{ID: "inv-1", Amount: 4300}) // corrected before it ran

	srv, _ := dedup.NewServer(rdb, nil, asynq.Config{}, dedup.MiddlewareOptions{})
	if err := srv.Start(dedup.Handle(invoices, func(ctx context.Context, i Invoice) (int64, error) {
		fmt.Println("sending amount", i.Amount)
		return i.Amount, nil
	})); err != nil {
		panic(err)
	}
	defer srv.Shutdown(ctx)
	if _, err := producer.Wait(ctx, job, 10*time.Second); err != nil {
		panic(err)
	}
	enqueue(Invoice{ID: "inv-1", Amount: 4400})
	// Output:
	// amount 4200: enqueued, replaced false
	// amount 4300: enqueued, replaced true
	// sending amount 4300
	// amount 4400: conflict, replaced false
}

// Reindex asks for a document to be indexed again.
type Reindex struct {
	Doc string `json:"doc"`
	Rev int    `json:"rev"`
}

// Under debounce:D/M every enqueue starts the job D later, and each repeat,
// with the same content or not, replaces the waiting job and moves its start
// D after itself, but never more than M after the first. Three edits in a
// row give one run, with the last revision.
func ExampleRepeat_debounce() {
	rdb := redistest.Shared() // your Redis: redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	producer, err := dedup.NewProducer(rdb, nil, dedup.ProducerOptions{})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	debounce, err := dedup.ParseRepeat("debounce:100ms/1m") // as ONCEQ_ON_REPEAT spells it
	if err != nil {
		panic(err)
	}
	reindex := dedup.Define(dedup.Spec[Reindex]{
		Type:   "doc:reindex",
		ID:     func(r Reindex) string { return r.Doc },
		Repeat: debounce,
	})
	var job dedup.Job
	for rev := 1; rev <= 3; rev++ {
		job = reindex.Job(Reindex{Doc: "doc-1", Rev: rev})
		out, err := producer.Enqueue(ctx, job)
		if err != nil {
			panic(err)
		}
		fmt.Printf("rev %d: %s %s, replaced %v\n", rev, out.Decision, out.State, out.Replaced)
	}

	// The worker checks for due scheduled tasks every 10 ms here (asynq's default: 5 s).
	srv, _ := dedup.NewServer(rdb, nil, asynq.Config{DelayedTaskCheckInterval: 10 * time.Millisecond}, dedup.MiddlewareOptions{})
	if err := srv.Start(dedup.Handle(reindex, func(ctx context.Context, r Reindex) (int, error) {
		fmt.Println("indexing", r.Doc, "rev", r.Rev)
		return r.Rev, nil
	})); err != nil {
		panic(err)
	}
	defer srv.Shutdown(ctx)
	st, _ := producer.Wait(ctx, job, 10*time.Second)
	fmt.Printf("%s %s\n", st.State, st.Result)
	// Output:
	// rev 1: enqueued scheduled, replaced false
	// rev 2: enqueued scheduled, replaced true
	// rev 3: enqueued scheduled, replaced true
	// indexing doc-1 rev 3
	// done 3
}
