package dedup_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/dedup/storage"
)

type resetPay struct {
	ID      string `json:"id"`
	Account string `json:"account"`
}

// resetKind has a time window on its key and a rate rule per account:
// windows a reset must find from the key alone.
var resetKind = dedup.Define(dedup.Spec[resetPay]{Type: "reset:pay", ID: func(p resetPay) string { return p.ID }, History: true,
	Window: time.Hour,
	Rules: func(p resetPay) ([]*dedup.Rule, error) {
		return []*dedup.Rule{{Key: dedup.Key{Namespace: "reset:acct", ID: p.Account}, Window: time.Hour}}, nil
	}})

// A done key, reset, takes its next job at once as a new incarnation (a new
// downstream key); its windows went with it, others' did not.
func TestResetDoneKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Client(t)
	rec := &oncetest.Recorder{}
	p, err := dedup.NewProducer(rdb, nil, dedup.ProducerOptions{Observer: rec.Observe})
	if err != nil {
		t.Fatal(err)
	}
	store, _ := dedup.NewRedisStore(rdb, storage.Options{})
	j := resetKind.Job(resetPay{"p-1", "a-1"})
	if out, err := p.Enqueue(ctx, j); err != nil || out.Decision != dedup.Enqueued {
		t.Fatalf("first: %+v %v", out, err)
	}
	// Another key's window on an unrelated rule key stays.
	other := dedup.Key{Namespace: "reset:acct", ID: "a-2"}
	if r, err := store.Reserve(ctx, other, time.Hour, "reset:pay/p-9"); err != nil || !r.Reserved {
		t.Fatalf("other window: %+v %v", r, err)
	}
	// The worker's run: claimed, done; asynq deletes the task.
	c, err := store.Claim(ctx, j.Key, j.Fingerprint, time.Minute, "")
	if err != nil || c.Outcome != dedup.Acquired {
		t.Fatalf("claim: %+v %v", c, err)
	}
	if err := store.Complete(ctx, c.Hold, []byte(`{"ok":true}`), 0); err != nil {
		t.Fatal(err)
	}
	if err := asynq.NewInspectorFromRedisClient(rdb).DeleteTask(j.Queue, j.Key.TaskID()); err != nil {
		t.Fatal(err)
	}
	if out, err := p.Enqueue(ctx, j); err != nil || out.Decision == dedup.Enqueued {
		t.Fatalf("repeat before the reset: %+v %v, want refused", out, err)
	}

	before, err := p.Reset(ctx, j.Key, false)
	if err != nil || !before.Known || before.State != dedup.StatusDone {
		t.Fatalf("reset: %+v %v, want it to report the done job", before, err)
	}
	if n := rec.Count(storage.Reset); n != 1 {
		t.Fatalf("%d reset events, want 1", n)
	}
	if r, err := store.Reserve(ctx, other, time.Hour, "reset:pay/p-8"); err != nil || r.Reserved || r.Holder != "reset:pay/p-9" {
		t.Fatalf("another key's window: %+v %v, want still held by reset:pay/p-9", r, err)
	}
	out, err := p.Enqueue(ctx, j)
	if err != nil || out.Decision != dedup.Enqueued || out.Incarnation != 2 {
		t.Fatalf("after the reset: %+v %v, want enqueued as incarnation 2", out, err)
	}
	info, err := asynq.NewInspectorFromRedisClient(rdb).GetTaskInfo(j.Queue, j.Key.TaskID())
	if err != nil || info.Headers[dedup.HeaderIncarnation] != "2" {
		t.Fatalf("task after the reset: %v %v, want incarnation header 2", info, err)
	}
	// The mark is spent: a second reset of the pending job, then the next
	// one is 3 (the pending job's 2 + 1), never back to 1.
	if _, err := p.Reset(ctx, j.Key, false); err != nil {
		t.Fatal(err)
	}
	if out, err := p.Enqueue(ctx, j); err != nil || out.Decision != dedup.Enqueued || out.Incarnation != 3 {
		t.Fatalf("after a second reset: %+v %v, want incarnation 3", out, err)
	}
}

// A pending job is cancelled with its key; nothing there is nothing done;
// the key's keys are all gone.
func TestResetPendingAndNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Client(t)
	p, err := dedup.NewProducer(rdb, nil, dedup.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := p.Reset(ctx, dedup.Key{Namespace: "reset:pay", ID: "none"}, false); err != nil || st.Known {
		t.Fatalf("reset of nothing: %+v %v, want not known", st, err)
	}
	j := resetKind.Job(resetPay{"p-2", "a-1"})
	if out, err := p.Enqueue(ctx, j); err != nil || out.Decision != dedup.Enqueued {
		t.Fatalf("first: %+v %v", out, err)
	}
	// Another key on the same account is throttled by the account's window.
	if out, _ := p.Enqueue(ctx, resetKind.Job(resetPay{"p-3", "a-1"})); out.Decision != dedup.Throttled {
		t.Fatalf("same account: %+v, want throttled", out)
	}
	if st, err := p.Reset(ctx, j.Key, false); err != nil || st.State != dedup.StatusPending {
		t.Fatalf("reset: %+v %v, want the pending job", st, err)
	}
	q, err := asynq.NewInspectorFromRedisClient(rdb).GetQueueInfo(j.Queue)
	if err != nil || q.Pending != 0 || q.Size != 0 {
		t.Fatalf("queue after the reset: %+v %v, want empty", q, err)
	}
	// The account's window went with the key that held it.
	if out, err := p.Enqueue(ctx, resetKind.Job(resetPay{"p-3", "a-1"})); err != nil || out.Decision != dedup.Enqueued {
		t.Fatalf("same account after the reset: %+v %v, want enqueued", out, err)
	}
	keys, err := rdb.Keys(ctx, "onceq:{*}:reset:pay/p-2:*").Result()
	slices.Sort(keys)
	if err != nil || !slices.Equal(keys, []string{dedup.RedisKey(j.Key, "hist"), dedup.RedisKey(j.Key, "inc")}) {
		t.Fatalf("keys of the reset key: %v %v, want only its history and incarnation mark", keys, err)
	}
	for _, k := range keys {
		if ttl := rdb.PTTL(ctx, k).Val(); ttl <= 0 {
			t.Fatalf("%s has no TTL: %v", k, ttl)
		}
	}
	// The history keeps the reset, with its way in, above the enqueue.
	h, err := p.History(dedup.WithSource(ctx, "ops"), j.Key)
	if err != nil || len(h) != 2 || h[0].Decision != "reset" || h[0].Source != "library" || h[0].Reason != "was pending" ||
		h[1].Decision != dedup.Enqueued {
		t.Fatalf("history %+v %v, want the reset (was pending) over the enqueue", h, err)
	}
}

// A running job refuses a reset, unless it is let finish unrecorded: then
// its completion is refused as a lost lease and records nothing.
func TestResetRunning(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Client(t)
	p, err := dedup.NewProducer(rdb, nil, dedup.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	store, _ := dedup.NewRedisStore(rdb, storage.Options{})
	j := resetKind.Job(resetPay{"p-4", "a-4"})
	if out, err := p.Enqueue(ctx, j); err != nil || out.Decision != dedup.Enqueued {
		t.Fatalf("first: %+v %v", out, err)
	}
	c, err := store.Claim(ctx, j.Key, j.Fingerprint, time.Minute, "")
	if err != nil || c.Outcome != dedup.Acquired {
		t.Fatalf("claim: %+v %v", c, err)
	}
	if _, err := p.Reset(ctx, j.Key, false); !errors.Is(err, dedup.ErrRunning) {
		t.Fatalf("reset of a running job: %v, want ErrRunning", err)
	}
	if r, _ := store.Status(ctx, j.Key); r.State != dedup.StatusRunning {
		t.Fatalf("refused reset changed the record: %+v", r)
	}
	if _, err := p.Reset(ctx, j.Key, true); err != nil {
		t.Fatalf("reset letting it finish: %v", err)
	}
	if err := store.Complete(ctx, c.Hold, []byte(`{}`), 0); !errors.Is(err, storage.ErrLeaseLost) {
		t.Fatalf("completion after the reset: %v, want ErrLeaseLost", err)
	}
	if r, _ := store.Status(ctx, j.Key); r.State != dedup.StatusUnknown {
		t.Fatalf("record after the unrecorded finish: %+v, want none", r)
	}
}
