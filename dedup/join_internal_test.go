package dedup

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup/internal/asynqwire"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/dedup/storage"
)

// What the join holds for asynq does not outlive it: a completion no
// acknowledgement carried is recorded alone (the job stays done, its
// OnRecorded hears nil), and a claim the dequeue made for a delivery that
// never came is released so the next delivery claims at once.
func TestJoinExpires(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, m, jc := joined(t)
	j := jc.j

	done := Key{Namespace: "join:test", ID: "parked"}
	c, err := store.Claim(ctx, done, "fp", time.Minute, "")
	if err != nil || c.Outcome != Acquired {
		t.Fatal(c.Outcome, err)
	}
	m.track(c.Hold, func(error) {})
	heard := make(chan error, 1)
	sink := &resultSink{recorded: []func(error){func(err error) { heard <- err }}}
	j.parkAs(context.Background(), taskName("q", "parked"), c.Hold, []byte(`"r"`), 0, 0, sink)

	lost := Key{Namespace: "join:test", ID: "undelivered"}
	c2, err := store.Claim(ctx, lost, "fp", time.Minute, "")
	if err != nil || c2.Outcome != Acquired {
		t.Fatal(c2.Outcome, err)
	}
	j.mu.Lock()
	j.claims[taskName("q", "undelivered")] = joinedClaim{rec: recordKey(lost), acquired: true,
		hold: storage.Hold{Token: c2.Hold.Token, Owner: c2.Hold.Owner}, at: time.Now()}
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

// joined is a middleware on a RedisStore of a fresh database, joined to
// the client it gives asynq; it shuts down with the test.
func joined(t *testing.T) (*redisStore, *Middleware, joiningClient) {
	t.Helper()
	rdb := redistest.Client(t)
	store, err := newRedisStore(rdb, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMiddleware(store, MiddlewareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Shutdown(context.Background()) })
	c, ok := joining(rdb, store, m).(joiningClient)
	if !ok || m.join == nil {
		t.Fatal("no join on a RedisStore sharing a single client")
	}
	return store, m, c
}

// The joined acknowledgement answers asynq in each case its script can
// end in: asynq's OK alone (record written), {0, OK} (the hold was stale:
// nothing written), {1, error} (written, asynq's task gone). asynq gets its
// own reply; the run hears ErrLeaseLost only when nothing was written.
func TestJoinedAckReplies(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, m, c := joined(t)
	rdb := store.rdb
	sha := asynqwire.SHA("done.lua")
	for _, tc := range []struct {
		name       string
		stale      bool // another claim took the key after this run's
		taskGone   bool // asynq's task is not active any more
		wantDone   bool // the record ends done by this run
		wantAsynq  string
		wantRunErr error
	}{
		{name: "ok", wantDone: true, wantAsynq: "OK"},
		{name: "stale", stale: true, wantAsynq: "OK", wantRunErr: storage.ErrLeaseLost},
		{name: "task gone", taskGone: true, wantDone: true, wantAsynq: "NOT FOUND"},
	} {
		k := Key{Namespace: "join:ack", ID: strings.ReplaceAll(tc.name, " ", "-")}
		cl, err := store.Claim(ctx, k, "fp", time.Minute, "")
		if err != nil || cl.Outcome != Acquired {
			t.Fatal(cl.Outcome, err)
		}
		if tc.stale {
			if err := store.Release(ctx, cl.Hold, "test"); err != nil {
				t.Fatal(err)
			}
			if c2, err := store.Claim(ctx, k, "fp", time.Minute, ""); err != nil || c2.Outcome != Acquired {
				t.Fatal(c2.Outcome, err)
			}
		}
		q, id := "ackq", k.TaskID()
		pfx := "asynq:{" + q + "}:"
		if !tc.taskGone {
			rdb.LPush(ctx, pfx+"active", id)
			rdb.ZAdd(ctx, pfx+"lease", redis.Z{Score: 1e10, Member: id})
			rdb.HSet(ctx, pfx+"t:"+id, "msg", "m", "state", "active")
		}
		m.track(cl.Hold, func(error) {})
		heard := make(chan error, 1)
		c.j.parkAs(context.Background(), taskName(q, id), cl.Hold, []byte(`"r"`), 0, 0, &resultSink{recorded: []func(error){func(err error) { heard <- err }}})
		keys := []string{pfx + "active", pfx + "lease", pfx + "t:" + id, pfx + "processed:2026-12-04", pfx + "processed"}
		got, err := c.EvalSha(ctx, sha, keys, id, time.Now().Add(time.Hour).Unix(), int64(1<<62)).Result()
		if tc.wantAsynq == "OK" && (err != nil || got != "OK") || tc.wantAsynq != "OK" && (err == nil || !strings.Contains(err.Error(), tc.wantAsynq)) {
			t.Errorf("%s: asynq got %v, %v; want %s", tc.name, got, err, tc.wantAsynq)
		}
		if runErr := <-heard; !errors.Is(runErr, tc.wantRunErr) || (tc.wantRunErr == nil) != (runErr == nil) {
			t.Errorf("%s: the run heard %v, want %v", tc.name, runErr, tc.wantRunErr)
		}
		r, err := store.Status(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if done := r.State == StatusDone && string(r.Result) == `"r"`; done != tc.wantDone {
			t.Errorf("%s: record %s %s, want done by this run: %v", tc.name, r.State, r.Result, tc.wantDone)
		}
	}
}

// A task's completion builds the key names it sends and no other: for a
// key with no history, with the store's compact marks, the record's, the
// holder's, one name for none (the history), the mark registry's, the
// mark id and its slot.
func TestCompletionBuildsWhatItSends(t *testing.T) {
	store, err := newRedisStore(redis.NewClient(&redis.Options{Addr: "127.0.0.1:0"}), storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := storage.Hold{Key: Key{Namespace: "email:send", ID: "a-1"}, Token: 7, Owner: "o/t"}
	var c asynqwire.Completion
	n := testing.AllocsPerRun(100, func() {
		c, err = store.completion(h, nil, 0, 0, false)
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.History != noneKey(h.Key) || c.Marks != markKey(h.Key) || c.Mark.Bucket == "" {
		t.Fatalf("completion names history %q, marks %q, mark %+v", c.History, c.Marks, c.Mark)
	}
	t.Logf("%v allocations", n)
	if n > 6 {
		t.Errorf("a completion allocates %v times, want at most 6", n)
	}
}
