package dedup_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
)

// histCalls fails the test for any command that names a key's history but
// a script: the history is written by the script that makes the decision,
// never in a call of its own.
type histCalls struct {
	t      *testing.T
	mu     sync.Mutex
	writes int // scripts sent with a history key
}

func (h *histCalls) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *histCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.check(cmd)
		return next(ctx, cmd)
	}
}
func (h *histCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			h.check(c)
		}
		return next(ctx, cmds)
	}
}

func (h *histCalls) check(cmd redis.Cmder) {
	for _, a := range cmd.Args()[1:] {
		if s, ok := a.(string); ok && strings.HasSuffix(s, ":hist") {
			if n := cmd.Name(); n != "evalsha" && n != "eval" && n != "get" && n != "pttl" { // reads aside
				h.t.Errorf("%s %s: the history written in a call of its own", n, s)
			}
			h.mu.Lock()
			h.writes++
			h.mu.Unlock()
			return
		}
	}
}

// entry is what a test compares of a HistoryEntry.
func entry(e dedup.HistoryEntry) string {
	return fmt.Sprintf("%s %s %s %d", e.Source, e.Decision, e.Reason, e.Incarnation)
}

// A key enqueued, repeated while pending, run (failing once, then done)
// and repeated once done shows those decisions in its history, newest
// first, with their ways in; the claims leave it once the key is done, and
// the history lives as long as the done record. Through the join and
// through the middleware's own calls alike, with no round trip of its own.
func TestHistoryThroughServer(t *testing.T) {
	t.Parallel()
	for _, joined := range []bool{true, false} {
		t.Run(fmt.Sprintf("joined=%v", joined), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			rs := redistest.Start(t)
			hook := &histCalls{t: t}
			rdb, wrdb := rs.Client(t), rs.Client(t)
			rdb.AddHook(hook)
			wrdb.AddHook(hook)
			var trips sent
			rdb.AddHook(&trips)
			kind, catalog := noteKind(t, false)

			producer, err := dedup.NewProducer(rdb, nil, dedup.ProducerOptions{Catalog: catalog})
			if err != nil {
				t.Fatal(err)
			}
			j := kind.Job(note{ID: "h-1"})
			if _, err := producer.Enqueue(ctx, kind.Job(note{ID: "warm"})); err != nil { // asynq's first names the queue
				t.Fatal(err)
			}
			trips.take()
			if out, err := producer.Enqueue(dedup.WithSource(ctx, "cli"), j); err != nil || out.Decision != dedup.Enqueued {
				t.Fatalf("enqueue: %+v %v", out, err)
			}
			if got := trips.take(); len(got) != 1 {
				t.Errorf("an enqueue recorded in the history sent %v, want one round trip", got)
			}
			if out, err := producer.Enqueue(dedup.WithSource(ctx, "http:alice"), j); err != nil || out.Decision != dedup.Duplicate {
				t.Fatalf("repeat: %+v %v", out, err)
			}

			srv, err := dedup.NewServer(wrdb, nil, asynq.Config{Concurrency: 2, LogLevel: asynq.WarnLevel,
				RetryDelayFunc: func(int, error, *asynq.Task) time.Duration { return 10 * time.Millisecond }},
				dedup.MiddlewareOptions{Catalog: catalog})
			if err != nil {
				t.Fatal(err)
			}
			dedup.ForgetJoinScripts(srv, !joined, !joined)
			var runs atomic.Int32
			mux := asynq.NewServeMux()
			mux.Handle(kind.Type, dedup.Handle(kind, func(ctx context.Context, n note) (string, error) {
				if n.ID == "h-1" && runs.Add(1) == 1 {
					return "", errors.New("gateway timeout")
				}
				return "noted", nil
			}))
			if err := srv.Start(mux); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = srv.Shutdown(ctx) })
			if st, err := producer.Wait(ctx, j, 30*time.Second); err != nil || st.State != dedup.StatusDone {
				t.Fatalf("wait: %s %v", st.State, err)
			}
			if out, err := producer.Enqueue(dedup.WithSource(ctx, "batch"), j); err != nil || out.Decision != dedup.Duplicate {
				t.Fatalf("repeat once done: %+v %v", out, err)
			}

			// A completion is recorded just before Wait may see it: read
			// until the run's entries are there.
			var got []string
			want := []string{
				"batch duplicate done 1",
				"worker completed  1",
				"worker released gateway timeout 1",
				"http:alice duplicate pending 1",
				"cli enqueued  1",
			}
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				h, err := producer.History(ctx, j.Key)
				if err != nil {
					t.Fatal(err)
				}
				got = got[:0]
				for _, e := range h {
					got = append(got, entry(e))
					if e.TaskID != j.Key.TaskID() || e.At.IsZero() {
						t.Fatalf("entry %+v: want task %s and a time", e, j.Key.TaskID())
					}
				}
				if slices.Equal(got, want) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("history %q,\nwant %q", got, want)
				}
			}
			// The key is remembered (record, then compact mark) for its done TTL.
			st, err := producer.Status(ctx, j.Key)
			if err != nil {
				t.Fatal(err)
			}
			if ttl := rdb.PTTL(ctx, dedup.RedisKey(j.Key, "hist")).Val(); ttl <= 0 || st.CompletedAt == nil ||
				time.Until(st.CompletedAt.Add(24*time.Hour)) < ttl-time.Second {
				t.Errorf("history TTL %v, key done at %v: want it no longer than the key is remembered", ttl, st.CompletedAt)
			}
			if hook.writes == 0 {
				t.Error("no script named the history")
			}
		})
	}
}

// The guard records a conflict, and a refusal it follows with a
// replacement only as that replacement.
func TestHistoryConflictAndReplace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Client(t)
	type doc struct {
		ID   string `json:"id"`
		Body string `json:"body"`
	}
	strict := dedup.Define(dedup.Spec[doc]{Type: "hist:strict", ID: func(d doc) string { return d.ID }, History: true})
	r, err := dedup.ParseRepeat("replace")
	if err != nil {
		t.Fatal(err)
	}
	replacing := dedup.Define(dedup.Spec[doc]{Type: "hist:replace", ID: func(d doc) string { return d.ID }, Repeat: r, History: true})
	p, err := dedup.NewProducer(rdb, nil, dedup.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	history := func(k dedup.Key) []string {
		h, err := p.History(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range h {
			out = append(out, entry(e))
		}
		return out
	}
	for _, c := range []struct {
		kind *dedup.Typed[doc]
		want []string
	}{
		{strict, []string{"library conflict  1", "library enqueued  1"}},
		{replacing, []string{"library enqueued replaced 1", "library enqueued  1"}},
	} {
		first, other := c.kind.Job(doc{ID: "d-1", Body: "a"}), c.kind.Job(doc{ID: "d-1", Body: "b"})
		if _, err := p.Enqueue(ctx, first); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Enqueue(ctx, other); err != nil {
			t.Fatal(err)
		}
		if got := history(first.Key); !slices.Equal(got, c.want) {
			t.Errorf("%s: history %q, want %q", c.kind.Type, got, c.want)
		}
	}
}

// A type that keeps no history (Spec.History false, the default) writes
// none: not at its enqueue, a repeat, the worker's claim or completion.
func TestNoHistoryUnlessTheTypeKeepsOne(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Start(t).Client(t)
	kind := dedup.Define(dedup.Spec[note]{Type: "hist:none", ID: func(n note) string { return n.ID }})
	catalog, err := dedup.NewCatalog(kind.Kind)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := dedup.NewServer(rdb, nil, asynq.Config{Concurrency: 2, LogLevel: asynq.WarnLevel}, dedup.MiddlewareOptions{Catalog: catalog})
	if err != nil {
		t.Fatal(err)
	}
	mux := asynq.NewServeMux()
	mux.Handle(kind.Type, dedup.Handle(kind, func(context.Context, note) (string, error) { return "ok", nil }))
	if err := srv.Start(mux); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Shutdown(ctx) }()
	producer, err := dedup.NewProducer(rdb, nil, dedup.ProducerOptions{Catalog: catalog})
	if err != nil {
		t.Fatal(err)
	}
	j := kind.Job(note{ID: "quiet"})
	if out, err := producer.Enqueue(ctx, j); err != nil || out.Decision != dedup.Enqueued {
		t.Fatalf("enqueue: %+v %v", out, err)
	}
	if st, err := producer.Wait(ctx, j, 20*time.Second); err != nil || st.State != dedup.StatusDone {
		t.Fatalf("wait: %+v %v", st, err)
	}
	if out, err := producer.Enqueue(ctx, j); err != nil || out.Decision != dedup.Duplicate {
		t.Fatalf("repeat: %+v %v", out, err)
	}
	if keys := rdb.Keys(ctx, "onceq:*:hist").Val(); len(keys) != 0 {
		t.Errorf("history keys %v, want none", keys)
	}
	if h, err := producer.History(ctx, j.Key); err != nil || len(h) != 0 {
		t.Errorf("history %v %v, want none", h, err)
	}
}
