package dedup

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/dedup/storage"
)

// refusals make a real Redis answer reads and refuse writes, each as it
// does in production; each returns what ends it.
var refusals = []struct {
	code   string
	refuse func(t *testing.T, rdb *redis.Client) (end func())
}{
	{"OOM", func(t *testing.T, rdb *redis.Client) func() {
		mustDo(t, rdb, "CONFIG", "SET", "maxmemory", "1") // noeviction: asynq's default policy and ours
		return func() { mustDo(t, rdb, "CONFIG", "SET", "maxmemory", "0") }
	}},
	{"NOREPLICAS", func(t *testing.T, rdb *redis.Client) func() {
		mustDo(t, rdb, "CONFIG", "SET", "min-replicas-to-write", "1") // and no replica
		return func() { mustDo(t, rdb, "CONFIG", "SET", "min-replicas-to-write", "0") }
	}},
	{"READONLY", func(t *testing.T, rdb *redis.Client) func() {
		// A replica of a port where nothing listens keeps its data.
		port, err := redistest.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		mustDo(t, rdb, "REPLICAOF", "127.0.0.1", strconv.Itoa(port))
		return func() { mustDo(t, rdb, "REPLICAOF", "NO", "ONE") }
	}},
}

func mustDo(t *testing.T, rdb *redis.Client, args ...any) {
	t.Helper()
	if err := rdb.Do(context.Background(), args...).Err(); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
}

// The recover step is refused whole while Redis refuses writes: its first
// write may grow memory, so neither OOM (which Redis lets a script pass once
// it has written) nor NOREPLICAS, READONLY or MISCONF can let it half-run.
// Once writes come back, the same step recovers the task.
func TestRecoverIsRefusedWholeWhileRedisRefusesWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Start(t).Client(t)
	store, err := NewRedisStore(rdb, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	k, _ := NewKey("refuse:t", "r-1")
	hangActive(t, rdb, k)
	if c, err := store.Claim(ctx, k, "fp", time.Hour, bootOwner+"/"+k.TaskID()); err != nil || c.Outcome != Acquired {
		t.Fatalf("claim: %+v %v", c, err)
	}
	orphans, err := findOrphans(ctx, rdb, "default", time.Time{})
	if err != nil || len(orphans) != 1 {
		t.Fatalf("orphans %v %v, want the one task whose owner has no liveness key", orphans, err)
	}
	// unchanged: the task active, not pending, and its claim held.
	unchanged := func(why string) {
		t.Helper()
		p := "asynq:{default}:"
		active, _ := rdb.LRange(ctx, p+"active", 0, -1).Result()
		pending, _ := rdb.LLen(ctx, p+"pending").Result()
		state, _ := rdb.HGet(ctx, p+"t:"+k.TaskID(), "state").Result()
		rec, err := store.Status(ctx, k)
		if len(active) != 1 || pending != 0 || state != "active" || err != nil || rec.State != StatusRunning {
			t.Errorf("%s: active %v, pending %d, task %s, record %s %v; want it all as it was", why, active, pending, state, rec.State, err)
		}
	}
	for _, r := range refusals {
		end := r.refuse(t, rdb)
		how, err := recoverOrphan(ctx, rdb, orphans[0], time.Hour)
		end()
		if err == nil || !strings.Contains(err.Error(), r.code) {
			t.Errorf("recover while Redis refuses writes with %s: %q %v, want Redis's %s error", r.code, how, err, r.code)
		}
		unchanged("after a refused recover (" + r.code + ")")
	}
	if how, err := recoverOrphan(ctx, rdb, orphans[0], time.Hour); err != nil || how != "retried" {
		t.Fatalf("recover with writes back: %q %v, want retried", how, err)
	}
}

// A worker that cannot write its liveness key says so: Liveness has the
// error (readiness probes show it), the Observer hears each failed refresh,
// and Liveness clears when writes come back.
func TestServerReportsFailedLivenessWrites(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	var mu sync.Mutex
	var events []Event
	const ttl = 600 * time.Millisecond
	srv, err := NewServer(rdb, nil, asynq.Config{LogLevel: asynq.FatalLevel, ShutdownTimeout: time.Millisecond},
		MiddlewareOptions{Liveness: ttl, Observer: func(_ context.Context, e Event) {
			if e.Op == opLiveness {
				mu.Lock()
				events = append(events, e)
				mu.Unlock()
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil })); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("not within 10 s: %s", what)
			}
		}
	}
	waitFor("a first liveness write", func() bool { _, ok := srv.writingSince(); return ok })
	if err := srv.Liveness(); err != nil {
		t.Fatalf("Liveness with writes working: %v", err)
	}

	end := refusals[0].refuse(t, rdb) // OOM
	waitFor("Liveness to report OOM", func() bool { err := srv.Liveness(); return err != nil && strings.Contains(err.Error(), "OOM") })
	if _, ok := srv.writingSince(); ok {
		t.Errorf("still counted as writing after a refused write")
	}
	waitFor("three refused refreshes", func() bool { mu.Lock(); defer mu.Unlock(); return len(events) >= 3 })
	end()
	waitFor("Liveness to clear", func() bool { return srv.Liveness() == nil })
	if _, ok := srv.writingSince(); !ok {
		t.Errorf("not counted as writing once a write worked again")
	}

	mu.Lock()
	defer mu.Unlock()
	for _, e := range events {
		if e.Outcome != outcomeError || !strings.Contains(e.Reason, "OOM") {
			t.Errorf("event %+v, want outcome error naming Redis's OOM", e)
		}
	}
}
