package oncetest_test

import (
	"context"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
)

type transfer struct {
	ID      string `json:"id"`
	Account string `json:"account"`
	Amount  int64  `json:"amount"`
}

// The Enqueuer answers a sequence of enqueues as the Producer on a real
// Redis does: enqueued, duplicate, conflict, throttled by a rule and by the
// Spec's window, scheduled with asynq's ProcessIn.
func TestEnqueuerAnswersAsTheProducer(t *testing.T) {
	t.Parallel()
	kind := dedup.Define(dedup.Spec[transfer]{Type: "transfer:make", ID: func(x transfer) string { return x.ID },
		Rules: func(x transfer) ([]*dedup.Rule, error) {
			k, err := dedup.NewKey("transfer:rate", x.Account)
			return []*dedup.Rule{{Key: k, Window: time.Minute}}, err
		}})
	scans := dedup.Define(dedup.Spec[transfer]{Type: "scan:file", Window: time.Minute})
	jobs := []struct {
		job  dedup.Job
		opts []asynq.Option
	}{
		{job: kind.Job(transfer{ID: "t-1", Account: "a", Amount: 5})},
		{job: kind.Job(transfer{ID: "t-1", Account: "a", Amount: 5})},
		{job: kind.Job(transfer{ID: "t-1", Account: "a", Amount: 6})},
		{job: kind.Job(transfer{ID: "t-2", Account: "a", Amount: 5})}, // the account's rule
		{job: kind.Job(transfer{ID: "t-3", Account: "b", Amount: 5}), opts: []asynq.Option{asynq.ProcessIn(time.Hour)}},
		{job: kind.Job(transfer{ID: "t-3", Account: "b", Amount: 5})},
		{job: scans.Job(transfer{ID: "f", Account: "x"})},
		{job: scans.Job(transfer{ID: "f", Account: "x"})}, // inside its own window
	}
	ctx := context.Background()
	real := oncetest.NewProducer(t, redistest.Client(t), nil, dedup.ProducerOptions{})
	fake := oncetest.NewEnqueuer(nil)
	for i, j := range jobs {
		want, err := real.Enqueue(ctx, j.job, j.opts...)
		if err != nil {
			t.Fatal(err)
		}
		got, err := fake.Enqueue(ctx, j.job, j.opts...)
		if err != nil {
			t.Fatal(err)
		}
		if got.Decision != want.Decision || got.State != want.State || got.Key != want.Key || got.TaskID != want.TaskID ||
			(want.RetryAfter > 0) != (got.RetryAfter > 0) {
			t.Errorf("enqueue %d (%s): Enqueuer %+v, Producer %+v", i, j.job.Key, got, want)
		}
	}
	if n := len(fake.Jobs()); n != 3 {
		t.Errorf("%d jobs accepted, want 3", n)
	}
	oncetest.RequireEnqueued(t, fake, kind.Job(transfer{ID: "t-3", Account: "b", Amount: 5}))
	oncetest.RequireNotEnqueued(t, fake, kind.Job(transfer{ID: "t-2"}).Key)
}

// A rule that outlasts its key (Rule.OutlastsKey) throttles a repeat of its
// holder once the key's unique window is over, as the Producer does once
// the key has forgotten the job.
func TestEnqueuerRuleOutlastsKey(t *testing.T) {
	t.Parallel()
	kind := dedup.Define(dedup.Spec[transfer]{Type: "delivery:take", ID: func(x transfer) string { return x.ID },
		Unique: time.Minute, Rules: func(x transfer) ([]*dedup.Rule, error) {
			k, err := dedup.NewKey("delivery:replay", x.Account)
			return []*dedup.Rule{{Key: k, Window: time.Hour, OutlastsKey: true}}, err
		}})
	clock := oncetest.NewClock(time.Unix(1_700_000_000, 0))
	fake := oncetest.NewEnqueuer(clock.Now)
	j := kind.Job(transfer{ID: "d-1", Account: "body"})
	for _, want := range []dedup.Decision{dedup.Enqueued, dedup.Duplicate} {
		if out, err := fake.Enqueue(context.Background(), j); err != nil || out.Decision != want {
			t.Fatalf("%+v %v; want %s", out, err, want)
		}
	}
	clock.Advance(2 * time.Minute)
	if out, err := fake.Enqueue(context.Background(), j); err != nil || out.Decision != dedup.Throttled {
		t.Fatalf("after the unique window: %+v %v; want throttled", out, err)
	}
}
