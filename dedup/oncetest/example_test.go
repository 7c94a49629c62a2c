package oncetest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest"
)

// Charge is a payment's payload.
type Charge struct {
	PaymentID string `json:"payment_id"`
	Amount    int64  `json:"amount"`
}

var charges = dedup.Define(dedup.Spec[Charge]{Type: "payment:charge", ID: func(c Charge) string { return c.PaymentID }})

// gateway is a fake payment gateway. With idempotent set it charges once
// per Idempotency-Key, as real gateways do; it reports each charge it makes
// to the test kit.
type gateway struct {
	idempotent bool
	mu         sync.Mutex
	seen       map[string]bool
}

func (g *gateway) charge(ctx context.Context, key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.idempotent && g.seen[key] {
		return // a repeat under the same key: answered, not charged
	}
	g.seen[key] = true
	oncetest.Effect(ctx)
}

// chargeHandler charges through gw with the run's downstream key; its first
// call loses the gateway's answer (the charge was made).
func chargeHandler(gw *gateway) func(context.Context, Charge) (string, error) {
	var calls int
	return func(ctx context.Context, c Charge) (string, error) {
		run, _ := dedup.RunFromContext(ctx)
		gw.charge(ctx, run.Downstream)
		if calls++; calls == 1 {
			fmt.Println("attempt", run.Attempt, "charged, answer lost")
			return "", errors.New("gateway timeout")
		}
		fmt.Println("attempt", run.Attempt, "charged with key", run.Downstream)
		return "ch_1", nil
	}
}

// A test of your own handler, no Redis needed: the job, built by your Spec,
// is delivered three times at once, as asynq may; the timeout is retried.
// The gateway charges once per key, so the payment is charged once.
func ExampleRequireOnce() {
	gw := &gateway{idempotent: true, seen: map[string]bool{}}
	h := dedup.Handle(charges, chargeHandler(gw))

	t := &testing.T{} // in your test, the *testing.T it is given
	rec := oncetest.RequireOnce(t, h, charges.Job(Charge{PaymentID: "pmt-1", Amount: 500}), 3)
	fmt.Println(rec.State, rec.Attempts, string(rec.Result))
	// Output:
	// attempt 1 charged, answer lost
	// attempt 2 charged with key payment:charge/pmt-1
	// done 2 "ch_1"
}

// The same handler against a gateway that charges every call: the retry
// charges again, and RequireOnce fails the test, though the handler
// returned nil only once.
func ExampleEffect() {
	gw := &gateway{seen: map[string]bool{}}
	h := dedup.Handle(charges, chargeHandler(gw))

	t := &failures{} // in your test, the *testing.T it is given
	oncetest.RequireOnce(t, h, charges.Job(Charge{PaymentID: "pmt-2", Amount: 500}), 3)
	fmt.Println(t.failed)
	// Output:
	// attempt 1 charged, answer lost
	// attempt 2 charged with key payment:charge/pmt-2
	// oncetest: payment:charge: 2 effects in 3 deliveries (1 runs succeeded), want exactly one
}

// failures is a testing.TB that keeps how a test failed, for the example.
type failures struct {
	testing.TB
	failed string
}

func (f *failures) Helper() {}

func (f *failures) Fatalf(format string, args ...any) {
	f.failed = strings.TrimSpace(fmt.Sprintf(format, args...))
}

// signUp is code under test: it enqueues a welcome email, keyed by the user.
func signUp(ctx context.Context, enq interface {
	Enqueue(context.Context, dedup.Job, ...asynq.Option) (dedup.Outcome, error)
}, user string) (dedup.Decision, error) {
	out, err := enq.Enqueue(ctx, welcomes.Job(Welcome{User: user}), asynq.ProcessIn(time.Minute))
	return out.Decision, err
}

// Welcome is a welcome email's payload.
type Welcome struct {
	User string `json:"user"`
}

var welcomes = dedup.Define(dedup.Spec[Welcome]{Type: "email:welcome", ID: func(w Welcome) string { return w.User }})

// A test of code that enqueues, no Redis needed: the Enqueuer answers as
// the Producer does and keeps what it accepted.
func ExampleEnqueuer() {
	ctx := context.Background()
	enq := oncetest.NewEnqueuer(nil)
	for range 2 {
		d, _ := signUp(ctx, enq, "ada")
		fmt.Println(d)
	}

	t := &testing.T{} // in your test, the *testing.T it is given
	job := oncetest.RequireEnqueued(t, enq, welcomes.Job(Welcome{User: "ada"}))
	fmt.Println(job.Key, len(enq.Jobs()))
	// Output:
	// enqueued
	// duplicate
	// email:welcome/ada 1
}
