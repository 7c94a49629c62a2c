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

// A repeat while the job runs is a duplicate of the running job, not a
// second run; the caller may Wait for its result.
func ExampleProducer_Enqueue_inProgress() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	producer := onceq.NewProducer(rdb, nil, onceq.ProducerOptions{})
	ctx := context.Background()

	invoices := onceq.Define(onceq.Spec[Invoice]{Type: "invoice:send", ID: func(i Invoice) string { return i.ID }})
	started, finish := make(chan struct{}), make(chan struct{})
	srv, _ := onceq.NewServer(rdb, nil, asynq.Config{}, onceq.MiddlewareOptions{})
	if err := srv.Start(onceq.Handle(invoices, func(ctx context.Context, i Invoice) (string, error) {
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
