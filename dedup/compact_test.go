package dedup_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/dedup/storage"
)

// compactStore keeps results for 100ms of a done TTL of done.
func compactStore(t *testing.T, done time.Duration) storage.Store {
	t.Helper()
	s, _ := newStore(t, redistest.Client(t), storage.Options{DoneTTL: done, ResultTTL: 100 * time.Millisecond})
	return s
}

// waitCompact waits until k's record has expired and its mark alone remembers it.
func waitCompact(t *testing.T, s storage.Store, k dedup.Key) storage.Record {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := s.Status(context.Background(), k)
		if err != nil {
			t.Fatal(err)
		}
		if r.Compact {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never compacted: %+v", k, r)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// After its result TTL a done key is still refused by the store's claim:
// the same content is a duplicate (without the result), other content a
// conflict, and Status says it is done, its result no longer kept. The
// same for a 30-day window (720h), which only the mark makes affordable.
func TestCompactClaim(t *testing.T) {
	t.Parallel()
	for _, done := range []time.Duration{time.Hour, 720 * time.Hour} {
		t.Run(done.String(), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := compactStore(t, done)
			k := mustKey(t, "email:send", "compact-"+done.String())
			c, err := s.Claim(ctx, k, "fp-a", time.Minute, "")
			if err != nil || c.Outcome != dedup.Acquired {
				t.Fatalf("claim: %+v, %v", c, err)
			}
			if err := s.Complete(ctx, c.Hold, []byte(`"sent"`), 0); err != nil {
				t.Fatal(err)
			}
			r := waitCompact(t, s, k)
			if r.State != dedup.StatusDone || r.Result != nil || time.Since(r.CompletedAt) > time.Minute ||
				r.ExpiresIn < done-time.Minute || r.ExpiresIn > done {
				t.Errorf("status: %+v; want done, compact, no result, remembered for the rest of %s", r, done)
			}
			again, err := s.Claim(ctx, k, "fp-a", time.Minute, "")
			if err != nil || again.Outcome != dedup.Duplicate || !again.Compact {
				t.Errorf("repeat: %+v, %v; want a compact duplicate", again, err)
			}
			other, err := s.Claim(ctx, k, "fp-b", time.Minute, "")
			if err != nil || other.Outcome != dedup.Conflict {
				t.Errorf("other content: %+v, %v; want a conflict", other, err)
			}
		})
	}
}

// The mark ends with the done TTL: the key is free again.
func TestCompactMarkExpires(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := compactStore(t, 1500*time.Millisecond)
	k := mustKey(t, "email:send", "compact-2")
	c, err := s.Claim(ctx, k, "fp-a", time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	// The mark ends its done TTL after the completion's own clock reading,
	// which is after this one: a reading taken after Complete returned
	// would be late by the call's time (1.4988 s "inside" 1.5 s under -race).
	done := time.Now()
	if err := s.Complete(ctx, c.Hold, nil, 0); err != nil {
		t.Fatal(err)
	}
	waitCompact(t, s, k)
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := s.Claim(ctx, k, "fp-a", time.Minute, "")
		if err != nil {
			t.Fatal(err)
		}
		if c.Outcome == dedup.Acquired {
			if since := time.Since(done); since < 1500*time.Millisecond {
				t.Fatalf("acquired %v after completion, inside the done TTL", since)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still %+v long after the done TTL", c)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// memo is the compaction tests' task type: keyed by its id, its text the
// rest of its content.
type memo struct {
	ID   string `json:"id"`
	Text string `json:"text"`
}

// After its result TTL a done key is remembered by its mark alone, and
// still nothing runs it again: the producer answers a repeat "duplicate,
// done; result no longer kept" and other content a conflict; a task that
// reaches the worker anyway (asynq's own enqueue, unguarded; or one
// guarded before another run of its key was done) is acknowledged unrun,
// through the middleware's claim and through the joined dequeue.
func TestCompactThroughServer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srvRedis := redistest.Start(t)
	rdb := srvRedis.Client(t)
	store, err := dedup.NewRedisStore(rdb, storage.Options{ResultTTL: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	kind := dedup.Define(dedup.Spec[memo]{Type: "compact:memo", ID: func(m memo) string { return m.ID }})
	successor, err := dedup.ParseRepeat("successor")
	if err != nil {
		t.Fatal(err)
	}
	follows := dedup.Define(dedup.Spec[memo]{Type: "compact:follows", ID: func(m memo) string { return m.ID }, Repeat: successor})
	catalog, err := dedup.NewCatalog(kind.Kind, follows.Kind)
	if err != nil {
		t.Fatal(err)
	}
	producer, err := dedup.NewProducer(rdb, store, dedup.ProducerOptions{Catalog: catalog})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := dedup.NewServer(rdb, store, asynq.Config{Concurrency: 2, LogLevel: asynq.WarnLevel,
		DelayedTaskCheckInterval: 20 * time.Millisecond}, dedup.MiddlewareOptions{Catalog: catalog})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	runs := map[string]int{}
	ran := func(id string) int { mu.Lock(); defer mu.Unlock(); return runs[id] }
	mux := asynq.NewServeMux()
	handle := func(ctx context.Context, m memo) (string, error) {
		mu.Lock()
		runs[m.ID]++
		mu.Unlock()
		return "noted", nil
	}
	mux.Handle(kind.Type, dedup.Handle(kind, handle))
	mux.Handle(follows.Type, dedup.Handle(follows, handle))
	if err := srv.Start(mux); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	insp := asynq.NewInspectorFromRedisClient(srvRedis.Client(t))
	gone := func(k dedup.Key) { // the task was handled and deleted
		t.Helper()
		waitFor(t, func() bool {
			_, err := insp.GetTaskInfo("default", k.TaskID())
			return errors.Is(err, asynq.ErrTaskNotFound)
		})
	}

	first := kind.Job(memo{ID: "a", Text: "hello"})
	if out, err := producer.Enqueue(ctx, first); err != nil || out.Decision != dedup.Enqueued {
		t.Fatalf("first: %+v %v", out, err)
	}
	waitFor(t, func() bool { return ran("a") == 1 })
	waitCompact(t, store, first.Key)

	out, err := producer.Enqueue(ctx, first)
	if err != nil || out.Decision != dedup.Duplicate || out.State != dedup.StatusDone ||
		!strings.Contains(out.Reason, "result no longer kept") {
		t.Errorf("repeat: %+v %v; want a duplicate, done, result no longer kept", out, err)
	}
	if out, err := producer.Enqueue(ctx, kind.Job(memo{ID: "a", Text: "other"})); err != nil || out.Decision != dedup.Conflict {
		t.Errorf("other content: %+v %v; want a conflict", out, err)
	}
	st, err := producer.Status(ctx, first.Key)
	if err != nil || st.State != dedup.StatusDone || st.Detail != "done; result no longer kept" {
		t.Errorf("status: %+v %v", st, err)
	}

	// asynq's own enqueue: the middleware's claim finds the mark.
	if _, err := asynq.NewClientFromRedisClient(srvRedis.Client(t)).Enqueue(first.Task, asynq.TaskID(first.Key.TaskID())); err != nil {
		t.Fatal(err)
	}
	gone(first.Key)

	// A task guarded while its key was free, due after another run of
	// the key was done and compacted: the joined dequeue finds the mark.
	late := kind.Job(memo{ID: "b", Text: "hello"})
	if out, err := producer.Enqueue(ctx, late, asynq.ProcessIn(time.Hour)); err != nil || out.Decision != dedup.Enqueued {
		t.Fatalf("late: %+v %v", out, err)
	}
	c, err := store.Claim(ctx, late.Key, late.Fingerprint, time.Minute, "")
	if err != nil || c.Outcome != dedup.Acquired {
		t.Fatalf("claim elsewhere: %+v %v", c, err)
	}
	if err := store.Complete(ctx, c.Hold, nil, 0); err != nil {
		t.Fatal(err)
	}
	waitCompact(t, store, late.Key)
	if err := insp.RunTask("default", late.Key.TaskID()); err != nil {
		t.Fatal(err)
	}
	gone(late.Key)
	if a, b := ran("a"), ran("b"); a != 1 || b != 0 {
		t.Errorf("runs a=%d b=%d; want 1 and 0: a compacted key ran again", a, b)
	}

	// Under the successor policy too, the same content is a duplicate.
	f := follows.Job(memo{ID: "f", Text: "hello"})
	if out, err := producer.Enqueue(ctx, f); err != nil || out.Decision != dedup.Enqueued {
		t.Fatalf("successor policy: %+v %v", out, err)
	}
	waitFor(t, func() bool { return ran("f") == 1 })
	waitCompact(t, store, f.Key)
	if out, err := producer.Enqueue(ctx, f); err != nil || out.Decision != dedup.Duplicate {
		t.Errorf("successor policy, repeat after compaction: %+v %v; want a duplicate", out, err)
	}

	// A reset frees a compacted key: its next job runs.
	if _, err := producer.Reset(ctx, first.Key, false); err != nil {
		t.Fatal(err)
	}
	if out, err := producer.Enqueue(ctx, first); err != nil || out.Decision != dedup.Enqueued || out.Incarnation != 2 {
		t.Fatalf("after the reset: %+v %v; want enqueued as incarnation 2", out, err)
	}
	waitFor(t, func() bool { return ran("a") == 2 })
}

// Marks cost the task path little: a task the guard checked a moment ago
// reaches its handler without its key's marks being read again (no
// registry HGETALL in the dequeue), and a completion writes its mark with
// a bucket HSET and a PEXPIRE NX, touching the registry only when a bucket
// opens (PTTL once per bucket, not per task); the completion of a key
// without a history does not look for one. The enqueue writes the task's
// hash once: onceq's fields go in asynq's own HSET.
func TestMarksCostOnTaskPath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srvRedis := redistest.Start(t)
	rdb := srvRedis.Client(t)
	store, err := dedup.NewRedisStore(rdb, storage.Options{}) // marks after 1h of a 24h done TTL
	if err != nil {
		t.Fatal(err)
	}
	kind := dedup.Define(dedup.Spec[memo]{Type: "cost:memo", ID: func(m memo) string { return m.ID }})
	catalog, err := dedup.NewCatalog(kind.Kind)
	if err != nil {
		t.Fatal(err)
	}
	producer, err := dedup.NewProducer(rdb, store, dedup.ProducerOptions{Catalog: catalog})
	if err != nil {
		t.Fatal(err)
	}
	var ran sync.WaitGroup
	mux := asynq.NewServeMux()
	mux.Handle(kind.Type, dedup.Handle(kind, func(context.Context, memo) (string, error) { ran.Done(); return "ok", nil }))
	srv, err := dedup.NewServer(rdb, store, asynq.Config{Concurrency: 4, LogLevel: asynq.WarnLevel}, dedup.MiddlewareOptions{Catalog: catalog})
	if err != nil {
		t.Fatal(err)
	}
	run := func(from, n int) {
		ran.Add(n)
		for i := from; i < from+n; i++ {
			if out, err := producer.Enqueue(ctx, kind.Job(memo{ID: fmt.Sprint(i), Text: "hi"})); err != nil || out.Decision != dedup.Enqueued {
				t.Fatalf("enqueue %d: %+v %v", i, out, err)
			}
		}
	}
	start := func(srv *dedup.Server) (stop func()) {
		if err := srv.Start(mux); err != nil {
			t.Fatal(err)
		}
		var once sync.Once
		stop = func() { once.Do(func() { _ = srv.Shutdown(context.Background()) }) }
		t.Cleanup(stop)
		return stop
	}
	stop := start(srv)
	run(0, 50) // the registries and buckets exist from here
	ran.Wait()
	stop()
	srv, err = dedup.NewServer(rdb, store, asynq.Config{Concurrency: 4, LogLevel: asynq.WarnLevel}, dedup.MiddlewareOptions{Catalog: catalog})
	if err != nil {
		t.Fatal(err)
	}
	const n = 200
	// calls is cmd's count since the last call (INFO commandstats, which
	// counts what scripts call).
	calls := func(cmd string) int {
		stats, err := rdb.Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		_, rest, ok := strings.Cut(stats, "cmdstat_"+cmd+":calls=")
		if !ok {
			return 0
		}
		c, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
		return c
	}
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	run(50, n)
	if c := calls("hset"); c != n {
		t.Errorf("%d HSET for %d enqueues, want one each: onceq's fields in asynq's HSET of the task", c, n)
	}
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	stop = start(srv)
	ran.Wait()
	stop() // its completions acknowledged
	if c := calls("hgetall"); c != 0 {
		t.Errorf("%d HGETALL for %d fresh tasks, want 0: the dequeue read marks the guard had just checked", c, n)
	}
	if c := calls("pexpire"); c < n || c > n+n/10 {
		t.Errorf("%d PEXPIRE for %d completions, want about one each (the bucket's NX)", c, n)
	}
	if c := calls("get"); c > 2*n+n/10 {
		t.Errorf("%d GET for %d tasks, want two each (asynq's count, the record): the completion looked for a history the producer never started", c, n)
	}
	if c := calls("pttl"); c > n/10 {
		t.Errorf("%d PTTL for %d completions, want a few: the registry is touched per bucket, not per mark", c, n)
	}
}
