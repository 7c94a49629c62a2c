package dedup

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup/internal/asynqwire"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/dedup/storage"
)

// The fast recoverer against asynq v0.26.0 itself: a task whose worker is
// gone (its claim's owner has no liveness key) goes back to pending with
// the attempt counted as asynq's recoverer counts it, its claim released
// and the old holder fenced out; with its retries spent it is archived; a
// live owner's task is left alone. asynq's Inspector reads the result, so
// the edited task message is checked by asynq's own decoder.
func TestFastRecovererContract(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Client(t)
	store, err := NewRedisStore(rdb, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	kinds := Define(Spec[struct {
		ID string `json:"id"`
	}]{Type: "recover:t", ID: func(p struct {
		ID string `json:"id"`
	}) string {
		return p.ID
	}})
	p, err := NewProducer(rdb, store, ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	insp := asynq.NewInspectorFromRedisClient(rdb)
	t.Cleanup(func() { insp.Close() })

	// A worker that claims and then hangs, as a killed one leaves its tasks.
	mw, err := NewMiddleware(store, MiddlewareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	started, hang := make(chan Run, 4), make(chan struct{})
	// Two slots for the two tasks: none is free to fetch the retried task
	// again before the test claims it.
	srv := asynq.NewServerFromRedisClient(rdb, ServerConfig(asynq.Config{Concurrency: 2, LogLevel: asynq.FatalLevel,
		TaskCheckInterval: 10 * time.Millisecond, ShutdownTimeout: time.Millisecond}))
	if err := srv.Start(mw.Wrap(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		r, _ := RunFromContext(ctx)
		started <- r
		<-hang
		return nil
	}))); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { close(hang); srv.Shutdown(); mw.Shutdown(ctx) })

	retry := kinds.Job(struct {
		ID string `json:"id"`
	}{"r-1"})
	retry.MaxRetry = 3
	spent := kinds.Job(struct {
		ID string `json:"id"`
	}{"r-2"})
	if _, err := p.Enqueue(ctx, retry); err != nil {
		t.Fatal(err)
	}
	// No retries at all: the Producer's 0 is asynq's default, so plain asynq.
	client := asynq.NewClientFromRedisClient(rdb)
	t.Cleanup(func() { client.Close() })
	if _, err := client.EnqueueContext(ctx, spent.Task, asynq.TaskID(spent.Key.TaskID()), asynq.MaxRetry(0)); err != nil {
		t.Fatal(err)
	}
	runs := map[Key]Run{}
	for range 2 {
		select {
		case r := <-started:
			runs[r.Key] = r
		case <-time.After(10 * time.Second):
			t.Fatal("the hanging worker never started both tasks")
		}
	}

	find := func() map[string]orphan {
		t.Helper()
		os, err := findOrphans(ctx, rdb, "default", time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]orphan{}
		for _, o := range os {
			m[o.id] = o
		}
		return m
	}
	// The owner lives while its liveness key does.
	if err := setLive(ctx, rdb, time.Minute); err != nil {
		t.Fatal(err)
	}
	if got := find(); len(got) != 0 {
		t.Fatalf("a live owner's tasks were found orphaned: %v", got)
	}
	// A step prepared while the owner was gone refuses once it is back.
	if err := delLive(ctx, rdb); err != nil {
		t.Fatal(err)
	}
	orphans := find()
	if len(orphans) != 2 {
		t.Fatalf("orphans %v, want both tasks", orphans)
	}
	setLive(ctx, rdb, time.Minute)
	if how, err := recoverOrphan(ctx, rdb, orphans[retry.Key.TaskID()], time.Hour); err != nil || how != "" {
		t.Fatalf("recovering a live owner's task: %q %v, want nothing done", how, err)
	}
	delLive(ctx, rdb)

	if how, err := recoverOrphan(ctx, rdb, orphans[retry.Key.TaskID()], time.Hour); err != nil || how != "retried" {
		t.Fatalf("recover %s: %q %v, want retried", retry.Key, how, err)
	}
	if how, err := recoverOrphan(ctx, rdb, orphans[retry.Key.TaskID()], time.Hour); err != nil || how != "" {
		t.Fatalf("recovering twice: %q %v, want nothing done", how, err)
	}
	if how, err := recoverOrphan(ctx, rdb, orphans[spent.Key.TaskID()], time.Hour); err != nil || how != "archived" {
		t.Fatalf("recover %s: %q %v, want archived", spent.Key, how, err)
	}
	info, err := insp.GetTaskInfo("default", retry.Key.TaskID())
	if err != nil {
		t.Fatal(err)
	}
	if info.State != asynq.TaskStatePending || info.Retried != 1 || info.MaxRetry != 3 ||
		!strings.Contains(info.LastErr, "is gone") || info.LastFailedAt.IsZero() {
		t.Errorf("retried task: state %v retried %d/%d last error %q at %v; want pending, 1 of 3, the owner gone",
			info.State, info.Retried, info.MaxRetry, info.LastErr, info.LastFailedAt)
	}
	info, err = insp.GetTaskInfo("default", spent.Key.TaskID())
	if err != nil || info.State != asynq.TaskStateArchived || info.Retried != 0 || !strings.Contains(info.LastErr, "is gone") {
		t.Errorf("spent task: %+v %v; want archived with the owner gone as its error", info, err)
	}
	// The claims are released, so the next delivery claims at once, and the
	// hung holder is fenced out.
	for _, j := range []Job{retry, spent} {
		rec, err := store.Status(ctx, j.Key)
		if err != nil || rec.State != StatusFailed {
			t.Errorf("%s record: %+v %v, want failed", j.Key, rec, err)
		}
	}
	old := runs[retry.Key]
	c, err := store.Claim(ctx, retry.Key, old.Fingerprint, time.Minute, "")
	if err != nil || c.Outcome != Acquired {
		t.Fatalf("claim after recovery: %+v %v, want acquired", c, err)
	}
	stale := storage.Hold{Key: retry.Key, Token: c.Hold.Token - 1, Owner: bootOwner + "/" + retry.Key.TaskID()}
	if err := store.Complete(ctx, stale, nil, 0); !errors.Is(err, storage.ErrLeaseLost) {
		t.Errorf("the hung holder's completion: %v, want ErrLeaseLost", err)
	}
}

// A Server recovers a task only once its owner's key has been missing for
// a whole liveness TTL, so a key a failover or one failed refresh lost for
// a moment never looks like a crash; a key that comes back resets it.
func TestServerWaitsOutTheLivenessTTL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, rdb := minuteServer(t)
	// An active task claimed by a delivery of this process, which keeps no
	// liveness key (the Server is never started).
	k, _ := NewKey("wait:t", "w-1")
	hangActive(t, rdb, k)
	if c, err := srv.store.Claim(ctx, k, "fp", time.Hour, bootOwner+"/"+k.TaskID()); err != nil || c.Outcome != Acquired {
		t.Fatalf("claim: %+v %v", c, err)
	}
	state := func() Status {
		t.Helper()
		r, err := srv.store.Status(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		return r.State
	}

	gone, t0 := map[string]time.Time{}, time.Now()
	for _, at := range []time.Duration{0, time.Minute - time.Millisecond} {
		if err := srv.recoverOnce(gone, at0(t0.Add(at))); err != nil || state() != StatusRunning {
			t.Fatalf("%v after the key went: %v, record %s; want the claim left alone", at, err, state())
		}
	}
	// The key comes back for one look: the clock starts again.
	setLive(ctx, rdb, time.Minute)
	if err := srv.recoverOnce(gone, at0(t0.Add(time.Minute))); err != nil || state() != StatusRunning {
		t.Fatalf("with the key back: %v, record %s", err, state())
	}
	delLive(ctx, rdb)
	t1 := t0.Add(2 * time.Minute)
	if err := srv.recoverOnce(gone, at0(t1)); err != nil || state() != StatusRunning {
		t.Fatalf("gone again: %v, record %s; want the claim left alone", err, state())
	}
	if err := srv.recoverOnce(gone, at0(t1.Add(time.Minute))); err != nil || state() != StatusFailed {
		t.Fatalf("a whole TTL gone: %v, record %s; want it released", err, state())
	}
}

// A worker judges another only over time it could write its own liveness
// key: while its own writes fail it judges nobody, and once they work again
// an owner missing since long before is gone only a whole TTL later. (Redis
// refusing writes keeps every worker from refreshing at once.)
func TestServerJudgesOnlyWhileItWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, rdb := minuteServer(t)
	k, _ := NewKey("wait:t", "judge")
	hangActive(t, rdb, k)
	if c, err := srv.store.Claim(ctx, k, "fp", time.Hour, bootOwner+"/"+k.TaskID()); err != nil || c.Outcome != Acquired {
		t.Fatalf("claim: %+v %v", c, err)
	}
	gone, t0 := map[string]time.Time{}, time.Now()
	srv.writing.Store(0) // its own refresh failed
	for _, at := range []time.Duration{0, time.Minute, 5 * time.Minute} {
		if err := srv.recoverOnce(gone, at0(t0.Add(at))); err != nil || recordState(t, srv, k) != StatusRunning {
			t.Fatalf("%v after the owner's key went, the judge not writing: %v, record %s; want the claim left alone",
				at, err, recordState(t, srv, k))
		}
	}
	t1 := t0.Add(5 * time.Minute)
	srv.writing.Store(t1.UnixNano())
	for _, at := range []time.Duration{0, time.Minute - time.Millisecond} {
		if err := srv.recoverOnce(gone, at0(t1.Add(at))); err != nil || recordState(t, srv, k) != StatusRunning {
			t.Fatalf("%v after the judge could write again: %v, record %s; want the claim left alone", at, err, recordState(t, srv, k))
		}
	}
	if err := srv.recoverOnce(gone, at0(t1.Add(time.Minute))); err != nil || recordState(t, srv, k) != StatusFailed {
		t.Fatalf("a whole TTL of the judge's own writes: %v, record %s; want the claim released", err, recordState(t, srv, k))
	}
}

// at0 is a clock stopped at t.
func at0(t time.Time) func() time.Time { return func() time.Time { return t } }

// The absence is timed per claim: a claim its owner took after the owner's
// key was first seen missing (a worker whose refresh lagged behind a Redis
// restart while its dequeue already ran) waits a whole TTL of its own.
func TestServerTimesEachClaimsAbsence(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, rdb := minuteServer(t)
	old, _ := NewKey("wait:t", "old")
	late, _ := NewKey("wait:t", "late")
	hangActive(t, rdb, old, late)
	claim := func(k Key) {
		t.Helper()
		if c, err := srv.store.Claim(ctx, k, "fp", time.Hour, bootOwner+"/"+k.TaskID()); err != nil || c.Outcome != Acquired {
			t.Fatalf("claim %s: %+v %v", k, c, err)
		}
	}
	state := func(k Key) Status { t.Helper(); return recordState(t, srv, k) }
	gone, t0 := map[string]time.Time{}, time.Now()
	claim(old)
	if err := srv.recoverOnce(gone, at0(t0)); err != nil || state(old) != StatusRunning {
		t.Fatalf("first look: %v, record %s", err, state(old))
	}
	claim(late) // the owner's key was already missing
	if err := srv.recoverOnce(gone, at0(t0.Add(time.Minute))); err != nil || state(old) != StatusFailed || state(late) != StatusRunning {
		t.Fatalf("a TTL after the first look: %v, records %s and %s; want the old claim released, the late one left alone",
			err, state(old), state(late))
	}
	if err := srv.recoverOnce(gone, at0(t0.Add(2*time.Minute))); err != nil || state(late) != StatusFailed {
		t.Fatalf("a TTL after the late claim was seen: %v, record %s; want it released", err, state(late))
	}
}

// recordState is the state of k's record on srv's store.
func recordState(t *testing.T, srv *Server, k Key) Status {
	t.Helper()
	r, err := srv.store.Status(context.Background(), k)
	if err != nil {
		t.Fatal(err)
	}
	return r.State
}

// hangActive enqueues a task for each key and returns once a plain asynq
// worker, with exactly as many slots, holds them all active until the test
// ends.
func hangActive(t *testing.T, rdb redis.UniversalClient, keys ...Key) {
	t.Helper()
	client := asynq.NewClientFromRedisClient(rdb)
	t.Cleanup(func() { client.Close() })
	for _, k := range keys {
		if _, err := client.EnqueueContext(context.Background(), asynq.NewTask("wait:t", nil), asynq.TaskID(k.TaskID())); err != nil {
			t.Fatal(err)
		}
	}
	started, hang := make(chan struct{}, len(keys)), make(chan struct{})
	worker := asynq.NewServerFromRedisClient(rdb, asynq.Config{LogLevel: asynq.FatalLevel, TaskCheckInterval: 10 * time.Millisecond,
		ShutdownTimeout: time.Millisecond, Concurrency: len(keys)})
	if err := worker.Start(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { started <- struct{}{}; <-hang; return nil })); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { close(hang); worker.Shutdown() })
	for range keys {
		<-started
	}
}

// minuteServer is a Server with a one-minute liveness TTL on a Redis of
// its own, never started, so its process keeps no liveness key; it judges
// others as one that has written its own key since long ago.
func minuteServer(t *testing.T) (*Server, redis.UniversalClient) {
	t.Helper()
	rdb := redistest.Client(t)
	srv, err := NewServer(rdb, nil, asynq.Config{}, MiddlewareOptions{Liveness: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	srv.writing.Store(1)
	return srv, rdb
}

// A dequeue whose reply was lost (Redis killed after it ran and was
// synced) leaves a task active with a claim of a live owner that no
// handler holds: nothing extends the claim's lease or asynq's. Once both
// ran out the task goes back to pending at once; while either is live it
// is left alone, since a live handler keeps both.
func TestServerRecoversALapsedClaimOfALiveOwner(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, rdb := minuteServer(t)
	setLive(ctx, rdb, time.Hour) // the owner lives throughout
	held, _ := NewKey("lapse:t", "held")
	lapsed, _ := NewKey("lapse:t", "lapsed")
	client := asynq.NewClientFromRedisClient(rdb)
	t.Cleanup(func() { client.Close() })
	// asynq v0.26.0's dequeue, with no processor to receive it.
	dequeue := func(k Key, lease time.Time) {
		t.Helper()
		if _, err := client.EnqueueContext(ctx, asynq.NewTask("lapse:t", nil), asynq.TaskID(k.TaskID())); err != nil {
			t.Fatal(err)
		}
		p := "asynq:{default}:"
		if err := errors.Join(rdb.LMove(ctx, p+"pending", p+"active", "RIGHT", "LEFT").Err(),
			rdb.HSet(ctx, p+"t:"+k.TaskID(), "state", "active").Err(),
			rdb.ZAdd(ctx, p+"lease", redis.Z{Score: float64(lease.Unix()), Member: k.TaskID()}).Err()); err != nil {
			t.Fatal(err)
		}
	}
	setLease := func(k Key, lease time.Time) {
		rdb.ZAdd(ctx, "asynq:{default}:lease", redis.Z{Score: float64(lease.Unix()), Member: k.TaskID()})
	}
	state := func(k Key) Status { t.Helper(); return recordState(t, srv, k) }
	old := time.Now().Add(-time.Minute) // asynq's lease over by more than its 30 s margin
	dequeue(held, old)
	dequeue(lapsed, time.Now().Add(30*time.Second))
	if c, err := srv.store.Claim(ctx, held, "fp", time.Hour, bootOwner+"/"+held.TaskID()); err != nil || c.Outcome != Acquired {
		t.Fatalf("claim: %+v %v", c, err)
	}
	if c, err := srv.store.Claim(ctx, lapsed, "fp", 20*time.Millisecond, bootOwner+"/"+lapsed.TaskID()); err != nil || c.Outcome != Acquired {
		t.Fatalf("claim: %+v %v", c, err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		r, err := srv.store.Status(ctx, lapsed)
		if err != nil {
			t.Fatal(err)
		}
		if r.LeaseUntil.Before(time.Now()) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the claim's lease never ran out: %+v", r)
		}
		time.Sleep(10 * time.Millisecond)
	}
	insp := asynq.NewInspectorFromRedisClient(rdb)
	t.Cleanup(func() { insp.Close() })
	// expect checks k's record and task after a look.
	expect := func(k Key, rec Status, task asynq.TaskState, why string) {
		t.Helper()
		info, err := insp.GetTaskInfo("default", k.TaskID())
		if err != nil {
			t.Fatal(err)
		}
		if got := state(k); got != rec || info.State != task {
			t.Errorf("%s: record %s, task %v; want %s, %v", why, got, info.State, rec, task)
		}
	}

	gone := map[string]time.Time{}
	if err := srv.recoverOnce(gone, time.Now); err != nil {
		t.Fatal(err)
	}
	expect(held, StatusRunning, asynq.TaskStateActive, "claim's lease live, asynq's over: left alone")
	expect(lapsed, StatusRunning, asynq.TaskStateActive, "claim's lease over, asynq's live: left alone")
	setLease(lapsed, old)
	// A judge that has written its own key for less than asynq's margin
	// (Redis just took writes again) could not have seen the owner extend.
	srv.writing.Store(time.Now().Add(-asynqwire.LeaseMargin + 5*time.Second).UnixNano())
	if err := srv.recoverOnce(gone, time.Now); err != nil {
		t.Fatal(err)
	}
	expect(lapsed, StatusRunning, asynq.TaskStateActive, "both leases over, the judge writing for 25 s: left alone")
	srv.writing.Store(time.Now().Add(-asynqwire.LeaseMargin).UnixNano())
	if err := srv.recoverOnce(gone, time.Now); err != nil {
		t.Fatal(err)
	}
	expect(lapsed, StatusFailed, asynq.TaskStatePending, "both leases over: the claim released, the task pending")
	expect(held, StatusRunning, asynq.TaskStateActive, "the held claim: left alone")
}

// setLive writes this process's liveness keys in every home, as a Server's
// refresh does; delLive deletes them.
func setLive(ctx context.Context, rdb redis.UniversalClient, ttl time.Duration) error {
	_, err := rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
		for h := range homes {
			pl.Set(ctx, liveKey(bootOwner, h), "1", ttl)
		}
		return nil
	})
	return err
}

func delLive(ctx context.Context, rdb redis.UniversalClient) error {
	_, err := rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
		for h := range homes {
			pl.Del(ctx, liveKey(bootOwner, h))
		}
		return nil
	})
	return err
}
