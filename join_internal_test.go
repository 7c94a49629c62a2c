package onceq

import (
	"context"
	"testing"
	"time"

	"github.com/onceq/onceq/internal/redistest"
)

// What the join holds for asynq does not outlive it: a completion no
// acknowledgement carried is recorded alone (the job stays done, its
// OnRecorded hears nil), and a claim the dequeue made for a delivery that
// never came is released so the next delivery claims at once.
func TestJoinExpires(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Client(t)
	store, err := NewRedisStore(rdb, StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMiddleware(store, MiddlewareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown(ctx)
	if joining(rdb, store, m) == rdb || m.join == nil {
		t.Fatal("no join on a RedisStore sharing a single client")
	}
	j := m.join

	done := Key{Namespace: "join:test", ID: "parked"}
	c, err := store.Claim(ctx, done, "fp", time.Minute, "")
	if err != nil || c.Outcome != Acquired {
		t.Fatal(c.Outcome, err)
	}
	m.track(c.Hold, func(error) {})
	heard := make(chan error, 1)
	sink := &resultSink{recorded: []func(error){func(err error) { heard <- err }}}
	j.parkAs(taskName("q", "parked"), c.Hold, []byte(`"r"`), 0, sink)

	lost := Key{Namespace: "join:test", ID: "undelivered"}
	c2, err := store.Claim(ctx, lost, "fp", time.Minute, "")
	if err != nil || c2.Outcome != Acquired {
		t.Fatal(c2.Outcome, err)
	}
	j.mu.Lock()
	j.claims[taskName("q", "undelivered")] = joinedClaim{rec: recordKey(lost), acquired: true,
		hold: Hold{Token: c2.Hold.Token, Owner: c2.Hold.Owner}, at: time.Now()}
	j.mu.Unlock()

	j.expire(time.Now().Add(time.Second), time.Now().Add(time.Second))
	select {
	case err := <-heard:
		if err != nil {
			t.Fatalf("the parked completion was recorded with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the parked completion was never recorded")
	}
	if r, err := store.Status(ctx, done); err != nil || r.State != StatusDone || string(r.Result) != `"r"` {
		t.Errorf("parked: %s %s %v; want done with its result", r.State, r.Result, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := store.Status(ctx, lost)
		if err == nil && r.State == StatusFailed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("undelivered: %s %v; want released (failed), claimable at once", r.State, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	j.mu.Lock()
	left := len(j.parked) + len(j.claims)
	j.mu.Unlock()
	if left != 0 {
		t.Errorf("%d entries left in the join", left)
	}
}
