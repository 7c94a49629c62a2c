package oncetest_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest"
)

// A test of your own handler: a charge whose gateway times out once. The
// task is delivered three times at once, as asynq may; the timeout is
// retried, and the charge still happens once. No Redis needed.
func ExampleRequireOnce() {
	var calls atomic.Int32
	charge := asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		run, _ := dedup.RunFromContext(ctx) // run.Downstream is the gateway's Idempotency-Key
		if calls.Add(1) == 1 {
			fmt.Println("attempt", run.Attempt, "gateway timeout")
			return errors.New("gateway timeout")
		}
		fmt.Println("attempt", run.Attempt, "charged with key", run.Downstream)
		dedup.SetResult(ctx, []byte(`{"charge_id":"ch_1"}`))
		return nil
	})

	t := &testing.T{} // in your test, the *testing.T it is given
	task := asynq.NewTask("payment:charge", []byte(`{"id":"pmt-1","amount":500,"currency":"EUR"}`))
	rec := oncetest.RequireOnce(t, charge, task, 3)
	fmt.Println(rec.State, rec.Attempts, string(rec.Result))
	// Output:
	// attempt 1 gateway timeout
	// attempt 2 charged with key payment:charge/pmt-1
	// done 2 {"charge_id":"ch_1"}
}
