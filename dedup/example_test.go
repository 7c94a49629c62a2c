package dedup_test

import (
	"context"
	"fmt"
	"time"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
)

// Invoice is your own task's payload.
type Invoice struct {
	ID     string `json:"id"`
	Amount int64  `json:"amount"`
}

// Define your task type, wrap your handler, enqueue. The invoice is sent
// once; enqueuing it again answers a duplicate with the stored result.
func Example() {
	rdb := redistest.Shared() // your Redis: redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	ctx := context.Background()

	invoices := dedup.Define(dedup.Spec[Invoice]{Type: "invoice:send", ID: func(i Invoice) string { return i.ID }})
	catalog, _ := dedup.NewCatalog(invoices.Kind)
	srv, _ := dedup.NewServer(rdb, nil, asynq.Config{}, dedup.MiddlewareOptions{Catalog: catalog})
	mux := asynq.NewServeMux()
	mux.Handle(invoices.Type, dedup.Handle(invoices, func(ctx context.Context, i Invoice) (string, error) {
		fmt.Println("sending", i.ID)
		return "sent", nil
	}))
	_ = srv.Start(mux)
	defer srv.Shutdown(ctx)

	producer, _ := dedup.NewProducer(rdb, nil, dedup.ProducerOptions{})
	job := invoices.Job(Invoice{ID: "inv-1", Amount: 4200})
	first, _ := producer.Enqueue(ctx, job)
	st, _ := producer.Wait(ctx, job, 10*time.Second)
	again, _ := producer.Enqueue(ctx, job)
	fmt.Printf("%s, %s; then %s %s\n", first.Decision, st.State, again.Decision, again.Result)
	// Output:
	// sending inv-1
	// enqueued, done; then duplicate "sent"
}
