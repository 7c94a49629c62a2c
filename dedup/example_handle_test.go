package dedup_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
)

// Charge is what the payment gateway answered.
type Charge struct {
	ID     string `json:"id"`
	Status string `json:"status"`
}

// Handle turns a typed function into an asynq handler: it decodes the
// payload strictly, validates it as the producer did, and gives the function
// the run's downstream key to send as the gateway's Idempotency-Key. Behind
// a Server its result is stored for duplicates; called directly, as here in
// a unit test without Redis, it keys the run by the same rule. A payload that
// can never succeed is not retried.
func ExampleHandle() {
	payments := dedup.Define(dedup.Spec[Payment]{
		Type: "payment:charge",
		ID:   func(p Payment) string { return p.PaymentID },
		Validate: func(p Payment) error {
			if p.Amount <= 0 {
				return fmt.Errorf("%w: amount must be positive", dedup.ErrInvalid)
			}
			return nil
		},
	})
	h := dedup.Handle(payments, func(ctx context.Context, p Payment) (Charge, error) {
		run, _ := dedup.RunFromContext(ctx)
		fmt.Printf("charge %d %s, Idempotency-Key %s\n", p.Amount, p.Currency, run.Downstream)
		return Charge{ID: "ch_1", Status: "succeeded"}, nil
	})

	ctx := context.Background()
	for _, body := range []string{
		`{"payment_id":"pmt-1","account":"acct-1","amount":4200,"currency":"EUR"}`,
		`{"payment_id":"pmt-2","account":"acct-1","amount":-1,"currency":"EUR"}`,
		`{"payment_id":"pmt-3","amount":"4200"}`,
	} {
		switch err := h.ProcessTask(ctx, asynq.NewTask("payment:charge", []byte(body))); {
		case err == nil:
			fmt.Println("ok")
		case errors.Is(err, asynq.SkipRetry):
			fmt.Println("not retried; invalid:", errors.Is(err, dedup.ErrInvalid), "malformed:", errors.Is(err, dedup.ErrMalformed))
		default:
			fmt.Println("retried:", err)
		}
	}
	// Output:
	// charge 4200 EUR, Idempotency-Key payment:charge/pmt-1
	// ok
	// not retried; invalid: true malformed: false
	// not retried; invalid: true malformed: true
}
