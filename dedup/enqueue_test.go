package dedup_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/dedup/storage"
)

// The guard recognises the scripts go.mod's asynq sends for an enqueue and
// a scheduled enqueue; a new asynq release fails here until lua/asynq is
// checked against it. On a real redis-server: the guard is Lua.
func TestEnqueueGuardContract(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Client(t)
	client := asynq.NewClientFromRedisClient(dedup.GuardEnqueues(rdb))
	insp := asynq.NewInspectorFromRedisClient(rdb)
	k := dedup.Key{Namespace: "guard:test", ID: "k-1"}
	for _, opts := range [][]asynq.Option{{}, {asynq.ProcessIn(time.Hour)}} {
		gctx, g := dedup.GuardEnqueue(ctx, rdb, k, "", "pending", "scheduled")
		opts = append(opts, asynq.TaskID(k.TaskID()))
		if _, err := client.EnqueueContext(gctx, asynq.NewTask("guard:test", []byte(`{}`)), opts...); err != nil {
			t.Fatal(err)
		}
		if !g.Ran {
			t.Fatalf("asynq's insert (%d options) did not run through the guard: lua/asynq no longer matches go.mod's asynq", len(opts))
		}
	}
	// The scheduled one replaced the pending one.
	q, err := insp.GetQueueInfo("default")
	if err != nil || q.Pending != 0 || q.Scheduled != 1 {
		t.Fatalf("queue %+v (%v); want the second insert to have replaced the first", q, err)
	}
	// Without replace states an existing task refuses, as asynq's own does.
	gctx, _ := dedup.GuardEnqueue(ctx, rdb, k, "")
	if _, err := client.EnqueueContext(gctx, asynq.NewTask("guard:test", nil), asynq.TaskID(k.TaskID())); !errors.Is(err, asynq.ErrTaskIDConflict) {
		t.Fatalf("unguarded repeat: %v, want ErrTaskIDConflict", err)
	}
	// An unguarded enqueue through the same client is asynq's, unchanged.
	if _, err := client.EnqueueContext(ctx, asynq.NewTask("guard:test", nil), asynq.TaskID(k.TaskID())); !errors.Is(err, asynq.ErrTaskIDConflict) {
		t.Fatalf("plain repeat: %v, want ErrTaskIDConflict", err)
	}
}

// On a Cluster the guard leaves the record out (another slot) and still
// swaps a task in its queue's slot.
func TestEnqueueGuardOnCluster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: redistest.StartCluster(t)})
	t.Cleanup(func() { rdb.Close() })
	client := asynq.NewClientFromRedisClient(dedup.GuardEnqueues(rdb))
	k := dedup.Key{Namespace: "guard:test", ID: "cluster-1"}
	for i, replace := range [][]string{nil, {"pending"}} {
		gctx, g := dedup.GuardEnqueue(ctx, rdb, k, "", replace...)
		if _, err := client.EnqueueContext(gctx, asynq.NewTask("guard:test", []byte{byte('a' + i)}), asynq.TaskID(k.TaskID())); err != nil || !g.Ran {
			t.Fatalf("insert %d on a cluster: %v (guard ran: %v)", i, err, g.Ran)
		}
	}
	info, err := asynq.NewInspectorFromRedisClient(rdb).GetTaskInfo("default", k.TaskID())
	if err != nil || string(info.Payload) != "b" {
		t.Fatalf("task %+v (%v), want the replacement", info, err)
	}
}

// A refused enqueue carries what holds the key, read in the same script:
// the task as asynq's Inspector reads it (decoded from asynq's message
// here, so this fails when go.mod's asynq encodes it otherwise) and the
// record. States: pending, scheduled, archived with its error, completed
// with a result.
func TestEnqueueRefusalDescribesHolder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Client(t)
	client := asynq.NewClientFromRedisClient(dedup.GuardEnqueues(rdb))
	insp := asynq.NewInspectorFromRedisClient(rdb)
	store, _ := newStore(t, rdb, storage.Options{})
	for i, setup := range []func(k dedup.Key) []asynq.Option{
		func(dedup.Key) []asynq.Option { return nil },
		func(dedup.Key) []asynq.Option { return []asynq.Option{asynq.ProcessIn(time.Hour)} },
		func(dedup.Key) []asynq.Option { return []asynq.Option{asynq.Retention(time.Hour)} },
	} {
		k := dedup.Key{Namespace: "guard:test", ID: fmt.Sprintf("held-%d", i)}
		q := fmt.Sprintf("refusal%d", i)
		task := asynq.NewTaskWithHeaders("guard:test", []byte(`{"n":1}`), map[string]string{"onceq-fp": "fp1", "x": "y"})
		opts := append(setup(k), asynq.TaskID(k.TaskID()), asynq.Queue(q))
		gctx, _ := dedup.GuardEnqueue(ctx, rdb, k, "fp1")
		if _, err := client.EnqueueContext(gctx, task, opts...); err != nil {
			t.Fatal(err)
		}
		if i == 2 { // archive it, then give its key a done record
			if err := insp.ArchiveTask(q, k.TaskID()); err != nil {
				t.Fatal(err)
			}
			c := mustClaim(t, store, k, "fp1", time.Minute, dedup.Acquired)
			if err := store.Complete(ctx, c.Hold, []byte(`"ok"`), 0); err != nil {
				t.Fatal(err)
			}
		}
		gctx, g := dedup.GuardEnqueue(ctx, rdb, k, "fp1")
		if _, err := client.EnqueueContext(gctx, task, opts...); !errors.Is(err, asynq.ErrTaskIDConflict) {
			t.Fatalf("%s: repeat: %v, want ErrTaskIDConflict", q, err)
		}
		if g.Found == nil {
			t.Fatalf("%s: the refusal carried nothing", q)
		}
		want, err := insp.GetTaskInfo(q, k.TaskID())
		if i == 2 {
			// The done record refuses before the task is looked at.
			if g.Found.Record.State != dedup.StatusDone || string(g.Found.Record.Result) != `"ok"` || g.Found.Record.ExpiresIn <= 0 {
				t.Errorf("%s: record %+v, want done with its result and TTL", q, g.Found.Record)
			}
		} else if g.Found.Record.State != dedup.StatusUnknown {
			t.Errorf("%s: record %+v, want none", q, g.Found.Record)
		}
		got := g.Found.Task
		if err != nil || got == nil {
			t.Fatalf("%s: task %v (inspector: %v)", q, got, err)
		}
		if got.ID != want.ID || got.Queue != want.Queue || got.Type != want.Type || string(got.Payload) != string(want.Payload) ||
			got.State != want.State || got.LastErr != want.LastErr || !got.CompletedAt.Equal(want.CompletedAt) ||
			string(got.Result) != string(want.Result) || fmt.Sprint(got.Headers) != fmt.Sprint(want.Headers) {
			t.Errorf("%s: refusal's task\n %+v\nInspector's\n %+v", q, got, want)
		}
	}
}

// Producer.Enqueue answers a duplicate in the enqueue's own round trip.
func TestDuplicateInOneRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	calls := &commandCount{}
	rdb.AddHook(calls)
	p, err := dedup.NewProducer(rdb, nil, dedup.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	type note struct {
		ID string `json:"id"`
	}
	kind := dedup.Define(dedup.Spec[note]{Type: "dup:note", ID: func(n note) string { return n.ID }})
	j := kind.Job(note{ID: "one"})
	if out, err := p.Enqueue(ctx, j); err != nil || out.Decision != dedup.Enqueued {
		t.Fatalf("first: %v %v", out.Decision, err)
	}
	before := calls.n.Load()
	out, err := p.Enqueue(ctx, j)
	if err != nil || out.Decision != dedup.Duplicate || out.State != dedup.StatusPending {
		t.Fatalf("repeat: %+v %v; want a duplicate, pending", out, err)
	}
	if n := calls.n.Load() - before; n != 1 {
		t.Errorf("a described duplicate took %d commands, want 1", n)
	}
}

type commandCount struct{ n atomic.Int64 }

func (c *commandCount) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *commandCount) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}
func (c *commandCount) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// Outside Cluster a job's rules are taken in the insert's own step: an
// enqueue with a rate rule is one command, a throttled one too, and a
// window is taken exactly when the task is inserted.
func TestRulesInTheInsertsStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Client(t)
	calls := &commandCount{}
	rdb.AddHook(calls)
	var events []dedup.Event
	store, err := dedup.NewRedisStore(rdb, storage.Options{Observer: func(_ context.Context, e dedup.Event) { events = append(events, e) }})
	if err != nil {
		t.Fatal(err)
	}
	p, err := dedup.NewProducer(rdb, store, dedup.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	type charge struct {
		ID      string `json:"id"`
		Account string `json:"account"`
		Note    string `json:"note"`
	}
	rate := func(c charge) dedup.Key { k, _ := dedup.NewKey("rate", c.Account); return k }
	kind := dedup.Define(dedup.Spec[charge]{Type: "fold:charge", ID: func(c charge) string { return c.ID },
		Rules: func(c charge) ([]*dedup.Rule, error) { return []*dedup.Rule{{Key: rate(c), Window: time.Minute}}, nil }})
	once := func(c charge, want dedup.Decision) dedup.Outcome {
		t.Helper()
		before := calls.n.Load()
		out, err := p.Enqueue(ctx, kind.Job(c))
		if err != nil || out.Decision != want {
			t.Fatalf("%+v: %+v %v; want %s", c, out, err, want)
		}
		if n := calls.n.Load() - before; n != 1 {
			t.Errorf("%+v (%s) took %d commands, want 1", c, want, n)
		}
		return out
	}
	// asynq's first enqueue also loads the script and names the queue.
	if _, err := p.Enqueue(ctx, kind.Job(charge{ID: "warm", Account: "acct-0"})); err != nil {
		t.Fatal(err)
	}
	a := charge{ID: "a", Account: "acct-1"}
	once(a, dedup.Enqueued)
	out := once(charge{ID: "b", Account: "acct-1"}, dedup.Throttled)
	if out.RetryAfter <= 0 || out.RetryAfter > time.Minute {
		t.Errorf("throttled: retry after %v, want within the minute", out.RetryAfter)
	}
	insp := asynq.NewInspectorFromRedisClient(rdb)
	t.Cleanup(func() { insp.Close() })
	if _, err := insp.GetTaskInfo("default", kind.Job(charge{ID: "b", Account: "acct-1"}).Key.TaskID()); !errors.Is(err, asynq.ErrTaskNotFound) {
		t.Errorf("the throttled job's task: %v, want none", err)
	}
	once(a, dedup.Duplicate) // its own window does not throttle a repeat
	if !slices.ContainsFunc(events, func(e dedup.Event) bool { return e.Op == "reserve" && e.Outcome == "throttled" }) {
		t.Errorf("no throttled reserve event in %v", events)
	}

	// A refused insert takes no window: a conflict on a's key leaves
	// acct-2's free.
	if out, err := p.Enqueue(ctx, kind.Job(charge{ID: "a", Account: "acct-2", Note: "other"})); err != nil || out.Decision != dedup.Conflict {
		t.Fatalf("conflict: %+v %v", out, err)
	}
	acct2, _ := dedup.NewKey("rate", "acct-2")
	if r, err := store.Reserve(ctx, acct2, time.Second, "probe"); err != nil || !r.Reserved {
		t.Errorf("after a refused insert acct-2's window: %+v %v, want free", r, err)
	}
	// And the window a's insert took is held by a.
	if r, err := store.Reserve(ctx, rate(a), time.Second, "probe"); err != nil || r.Reserved || r.Holder != kind.Job(a).Key.String() {
		t.Errorf("acct-1's window: %+v %v, want held by %s", r, err, kind.Job(a).Key)
	}
}

// A time window (Spec.Window) refuses a repeat of its own job, in the
// insert's step too.
func TestWindowRefusesItsOwnRepeatInOneStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Client(t)
	p, err := dedup.NewProducer(rdb, nil, dedup.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	type ping struct {
		ID string `json:"id"`
	}
	kind := dedup.Define(dedup.Spec[ping]{Type: "fold:ping", ID: func(p ping) string { return p.ID }, Window: time.Minute})
	if out, err := p.Enqueue(ctx, kind.Job(ping{"x"})); err != nil || out.Decision != dedup.Enqueued {
		t.Fatalf("first: %+v %v", out, err)
	}
	if out, err := p.Enqueue(ctx, kind.Job(ping{"x"})); err != nil || out.Decision != dedup.Throttled || out.RetryAfter <= 0 {
		t.Fatalf("repeat inside the window: %+v %v; want throttled", out, err)
	}
}

// asynq keeps a completed task (Retention) only where something needs it:
// the dashboard (Spec.WriteResult), or a Producer whose insert cannot read
// the key's record (a Store other than a RedisStore on its client; Redis
// Cluster likewise). Otherwise the record alone refuses repeats, and asynq
// deletes the task as it completes.
func TestCompletedTaskKeptOnlyWhereNeeded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Client(t)
	type note struct {
		ID string `json:"id"`
	}
	plain := dedup.Define(dedup.Spec[note]{Type: "keep:plain", ID: func(n note) string { return n.ID }})
	shown := dedup.Define(dedup.Spec[note]{Type: "keep:shown", ID: func(n note) string { return n.ID }, WriteResult: true})
	memory, err := oncetest.NewStore(storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	insp := asynq.NewInspectorFromRedisClient(rdb)
	for _, c := range []struct {
		name  string
		store storage.Store
		job   dedup.Job
		want  time.Duration
	}{
		{"record read in the insert", nil, plain.Job(note{ID: "a"}), 0},
		{"shown on the dashboard", nil, shown.Job(note{ID: "b"}), 24 * time.Hour},
		{"record elsewhere", memory, plain.Job(note{ID: "c"}), 24 * time.Hour},
	} {
		out, err := oncetest.NewProducer(t, rdb, c.store, dedup.ProducerOptions{}).Enqueue(ctx, c.job)
		if err != nil || out.Decision != dedup.Enqueued {
			t.Fatalf("%s: %+v %v", c.name, out, err)
		}
		info, err := insp.GetTaskInfo(out.Queue, out.TaskID)
		if err != nil || info.Retention != c.want {
			t.Errorf("%s: task %+v (%v), want retention %v", c.name, info, err, c.want)
		}
	}
}

// A rule that outlasts its job's key (Rule.OutlastsKey) leaves a repeat of
// its holder to the key while the key knows the job, and throttles it once
// the key has forgotten it; without the flag the repeat starts the job
// again. In the insert's step, and where the windows are reserved apart (a
// Store other than a RedisStore on the Producer's client).
func TestRuleOutlastsKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	memory, err := oncetest.NewStore(storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	type delivery struct {
		ID   string `json:"id"`
		Body string `json:"body"`
	}
	for _, c := range []struct {
		name  string
		store storage.Store
	}{{"folded", nil}, {"reserved apart", memory}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			rdb := redistest.Client(t)
			p := oncetest.NewProducer(t, rdb, c.store, dedup.ProducerOptions{})
			insp := asynq.NewInspectorFromRedisClient(rdb)
			t.Cleanup(func() { insp.Close() })
			kind := func(typ string, outlasts bool) *dedup.Typed[delivery] {
				return dedup.Define(dedup.Spec[delivery]{Type: typ, ID: func(d delivery) string { return d.ID },
					Rules: func(d delivery) ([]*dedup.Rule, error) {
						k, _ := dedup.NewKey(typ+":replay", d.Body)
						return []*dedup.Rule{{Key: k, Window: time.Hour, OutlastsKey: outlasts}}, nil
					}})
			}
			enqueue := func(j dedup.Job, want dedup.Decision) {
				t.Helper()
				if out, err := p.Enqueue(ctx, j); err != nil || out.Decision != want {
					t.Fatalf("%s: %+v %v; want %s", j.Key, out, err, want)
				}
			}
			forget := func(j dedup.Job) {
				t.Helper()
				if err := insp.DeleteTask(j.Queue, j.Key.TaskID()); err != nil {
					t.Fatal(err)
				}
			}
			replay, plain := kind("outlast:replay", true), kind("outlast:plain", false)
			a := replay.Job(delivery{ID: "a", Body: "b1"})
			enqueue(a, dedup.Enqueued)
			enqueue(a, dedup.Duplicate)                                             // the key answers
			enqueue(replay.Job(delivery{ID: "other", Body: "b1"}), dedup.Throttled) // another holder
			forget(a)
			enqueue(a, dedup.Throttled) // the key forgot it; the window did not

			b := plain.Job(delivery{ID: "a", Body: "b1"})
			enqueue(b, dedup.Enqueued)
			forget(b)
			enqueue(b, dedup.Enqueued) // without the flag: the job again
		})
	}
}
