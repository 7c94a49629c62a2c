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

// A repeat while the job runs is a duplicate of the running job, not a
// second run; the caller may Wait for its result.
func ExampleProducer_Enqueue_inProgress() {
	rdb := redistest.Shared() // your Redis: redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	producer, err := dedup.NewProducer(rdb, nil, dedup.ProducerOptions{})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	invoices := dedup.Define(dedup.Spec[Invoice]{Type: "invoice:send", ID: func(i Invoice) string { return i.ID }})
	started, finish := make(chan struct{}), make(chan struct{})
	srv, _ := dedup.NewServer(rdb, nil, asynq.Config{}, dedup.MiddlewareOptions{})
	if err := srv.Start(dedup.Handle(invoices, func(ctx context.Context, i Invoice) (string, error) {
		close(started)
		<-finish
		return "sent", nil
	})); err != nil {
		panic(err)
	}
	defer srv.Shutdown(ctx)

	job := invoices.Job(Invoice{ID: "inv-1", Amount: 4200})
	if _, err := producer.Enqueue(ctx, job); err != nil {
		panic(err)
	}
	<-started
	out, _ := producer.Enqueue(ctx, job)
	fmt.Println(out.Decision, out.State)
	close(finish)
	st, _ := producer.Wait(ctx, job, 10*time.Second)
	fmt.Printf("%s %s\n", st.State, st.Result)
	// Output:
	// duplicate running
	// done "sent"
}
