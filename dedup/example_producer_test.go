package dedup_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
)

// Enqueue your own type: declare it once with Define, build each Job from a
// Go value with Job, and hand it to Enqueue. The same invoice again, while
// its job waits in the queue, is a duplicate of that job; a payload the Spec
// refuses is an error wrapping ErrInvalid, and nothing is enqueued.
func ExampleProducer_Enqueue() {
	rdb := redistest.Shared() // your Redis: redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	producer, err := dedup.NewProducer(rdb, nil, dedup.ProducerOptions{})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	invoices := dedup.Define(dedup.Spec[Invoice]{
		Type: "invoice:send",
		ID:   func(i Invoice) string { return i.ID },
		Validate: func(i Invoice) error {
			if i.Amount <= 0 {
				return fmt.Errorf("%w: amount %d is not positive", dedup.ErrInvalid, i.Amount)
			}
			return nil
		},
	})
	for _, inv := range []Invoice{{ID: "inv-1", Amount: 4200}, {ID: "inv-1", Amount: 4200}} {
		out, err := producer.Enqueue(ctx, invoices.Job(inv))
		if err != nil {
			panic(err)
		}
		fmt.Println(out.Decision, out.Key, "task", out.TaskID, out.State)
	}
	_, err = producer.Enqueue(ctx, invoices.Job(Invoice{ID: "inv-2", Amount: -5}))
	fmt.Println(errors.Is(err, dedup.ErrInvalid), err)
	// Output:
	// enqueued invoice:send/inv-1 task invoice:send=inv~1 pending
	// duplicate invoice:send/inv-1 task invoice:send=inv~1 pending
	// true invalid payload: amount -5 is not positive
}

// Payment is a charge keyed by its payment id.
type Payment struct {
	PaymentID string `json:"payment_id"`
	Account   string `json:"account"`
	Amount    int64  `json:"amount"`
	Currency  string `json:"currency"`
}

// A key reused with other content is a conflict, never a duplicate: a
// payment id sent again with another amount is refused, nothing is
// enqueued, and the caller learns nothing of the other job's state or
// result.
func ExampleProducer_Enqueue_conflict() {
	rdb := redistest.Shared() // your Redis: redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	producer, err := dedup.NewProducer(rdb, nil, dedup.ProducerOptions{})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	payments := dedup.Define(dedup.Spec[Payment]{
		Type: "payment:charge",
		ID:   func(p Payment) string { return p.PaymentID },
	})
	for _, p := range []Payment{
		{PaymentID: "pmt-1", Account: "acct-1", Amount: 4200, Currency: "EUR"},
		{PaymentID: "pmt-1", Account: "acct-9", Amount: 999999, Currency: "USD"},
	} {
		out, err := producer.Enqueue(ctx, payments.Job(p))
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s %s (state %s, result %q)\n", out.Decision, out.Key, out.State, out.Result)
	}
	// Output:
	// enqueued payment:charge/pmt-1 (state pending, result "")
	// conflict payment:charge/pmt-1 (state unknown, result "")
}
