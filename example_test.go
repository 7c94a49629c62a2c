package onceq_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq"
)

// Invoice is your own task's payload.
type Invoice struct {
	ID     string `json:"id"`
	Amount int64  `json:"amount"`
}

// Define your task type, wrap your handler, enqueue. The invoice is sent
// once; enqueuing it again answers a duplicate with the stored result.
func Example() {
	mr, _ := miniredis.Run() // an embedded Redis; use your own
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	ctx := context.Background()

	invoices := onceq.Define(onceq.Spec[Invoice]{Type: "invoice:send", ID: func(i Invoice) string { return i.ID }})
	catalog, _ := onceq.NewCatalog(invoices.Kind)
	srv, _ := onceq.NewServer(rdb, nil, asynq.Config{}, onceq.MiddlewareOptions{Catalog: catalog})
	mux := asynq.NewServeMux()
	mux.Handle(invoices.Type, onceq.Handle(invoices, func(ctx context.Context, i Invoice) (string, error) {
		fmt.Println("sending", i.ID)
		return "sent", nil
	}))
	_ = srv.Start(mux)
	defer srv.Shutdown(ctx)

	producer := onceq.NewProducer(rdb, nil, onceq.ProducerOptions{})
	job := invoices.Job(Invoice{ID: "inv-1", Amount: 4200})
	first, _ := producer.Enqueue(ctx, job)
	st, _ := producer.Wait(ctx, job, 10*time.Second)
	again, _ := producer.Enqueue(ctx, job)
	fmt.Printf("%s, %s; then %s %s\n", first.Decision, st.State, again.Decision, again.Result)
	// Output:
	// sending inv-1
	// enqueued, done; then duplicate "sent"
}
