package dedup_test

import (
	"context"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
)

// A job that failed for good frees its key: the next enqueue runs as a new
// incarnation, with a new downstream key (key#2), so a gateway that cached
// the decline under the first key does not replay it. Retries within one
// incarnation would share its key.
func ExampleRun() {
	rdb := redistest.Shared() // your Redis: redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	producer, err := dedup.NewProducer(rdb, nil, dedup.ProducerOptions{})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	// A gateway that declines its first request and caches every answer
	// under the request's Idempotency-Key.
	var mu sync.Mutex
	answers := map[string]string{}
	charge := func(idempotencyKey string) string {
		mu.Lock()
		defer mu.Unlock()
		if a, ok := answers[idempotencyKey]; ok {
			return a
		}
		a := "approved"
		if len(answers) == 0 {
			a = "declined"
		}
		answers[idempotencyKey] = a
		return a
	}

	payments := dedup.Define(dedup.Spec[Payment]{Type: "payment:charge", ID: func(p Payment) string { return p.PaymentID }})
	srv, _ := dedup.NewServer(rdb, nil, asynq.Config{}, dedup.MiddlewareOptions{})
	if err := srv.Start(dedup.Handle(payments, func(ctx context.Context, p Payment) (string, error) {
		run, _ := dedup.RunFromContext(ctx)
		answer := charge(run.Downstream)
		fmt.Printf("incarnation %d, key %s: %s\n", run.Incarnation, run.Downstream, answer)
		if answer == "declined" {
			return "", fmt.Errorf("card declined: %w", asynq.SkipRetry) // failed for good
		}
		return answer, nil
	})); err != nil {
		panic(err)
	}
	defer srv.Shutdown(ctx)

	job := payments.Job(Payment{PaymentID: "pmt-1", Account: "acct-1", Amount: 4200, Currency: "EUR"})
	for range 2 {
		out, err := producer.Enqueue(ctx, job)
		if err != nil {
			panic(err)
		}
		st, _ := producer.Wait(ctx, job, 10*time.Second)
		fmt.Printf("%s incarnation %d -> %s\n", out.Decision, out.Incarnation, st.State)
	}
	st, _ := producer.Status(ctx, job.Key)
	fmt.Println("earlier failures:", st.EarlierFailures)
	// Output:
	// incarnation 1, key payment:charge/pmt-1: declined
	// enqueued incarnation 1 -> archived
	// incarnation 2, key payment:charge/pmt-1#2: approved
	// enqueued incarnation 2 -> done
	// earlier failures: [card declined: skip retry for the task]
}
