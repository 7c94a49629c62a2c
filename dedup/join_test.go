package dedup_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
)

// recordCalls counts the commands a client sends of its own on idempotency
// records (a claim's SET or script, a completion's script): what the join
// saves, since inside a joined script they are not commands of the client.
type recordCalls struct {
	mu sync.Mutex
	n  map[string]int // command name -> count
}

func (c *recordCalls) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *recordCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.count(cmd)
		return next(ctx, cmd)
	}
}

func (c *recordCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			c.count(cmd)
		}
		return next(ctx, cmds)
	}
}

func (c *recordCalls) count(cmd redis.Cmder) {
	args := cmd.Args()
	key := ""
	switch name := cmd.Name(); name {
	case "set":
		key, _ = args[1].(string)
	case "evalsha": // not an EVAL: that re-sends a script after NOSCRIPT
		if len(args) > 3 {
			key, _ = args[3].(string)
		}
	default:
		return
	}
	if strings.HasPrefix(key, "onceq:") && strings.HasSuffix(key, ":rec") {
		c.mu.Lock()
		c.n[cmd.Name()]++
		c.mu.Unlock()
	}
}

func (c *recordCalls) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.n {
		n += v
	}
	return n
}

// joinRun processes n jobs through a Server on a real redis-server, with
// forget passed to ForgetJoinScripts, and returns the record commands the
// worker sent of its own per job and the middleware's events.
// note is the join tests' task type: a note keyed by its id.
type note struct {
	ID string `json:"id"`
}

// noteKind is the note type; shown puts its completed tasks on the
// dashboard (Spec.WriteResult: asynq keeps them).
func noteKind(t *testing.T, shown bool) (*dedup.Typed[note], *dedup.Catalog) {
	t.Helper()
	kind := dedup.Define(dedup.Spec[note]{Type: "join:note", ID: func(n note) string { return n.ID }, WriteResult: shown, History: true})
	catalog, err := dedup.NewCatalog(kind.Kind)
	if err != nil {
		t.Fatal(err)
	}
	return kind, catalog
}

func joinRun(t *testing.T, n int, forgetDequeue, forgetAck, shown bool) (perJob float64, events []dedup.Event) {
	t.Helper()
	ctx := context.Background()
	srvRedis := redistest.Start(t)
	rdb := srvRedis.Client(t)
	calls := &recordCalls{n: map[string]int{}}
	wrdb := srvRedis.Client(t)
	wrdb.AddHook(calls)

	kind, catalog := noteKind(t, shown)
	rec := &oncetest.Recorder{}
	srv, err := dedup.NewServer(wrdb, nil, asynq.Config{Concurrency: 4, LogLevel: asynq.WarnLevel},
		dedup.MiddlewareOptions{Catalog: catalog, Observer: rec.Observe})
	if err != nil {
		t.Fatal(err)
	}
	dedup.ForgetJoinScripts(srv, forgetDequeue, forgetAck)
	var mu sync.Mutex
	runs := map[string]int{}
	mux := asynq.NewServeMux()
	mux.Handle(kind.Type, dedup.Handle(kind, func(ctx context.Context, n note) (string, error) {
		mu.Lock()
		runs[n.ID]++
		mu.Unlock()
		return "noted " + n.ID, nil
	}))
	if err := srv.Start(mux); err != nil {
		t.Fatal(err)
	}
	var stop sync.Once
	shutdown := func() {
		stop.Do(func() {
			if err := srv.Shutdown(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	defer shutdown()

	producer, err := dedup.NewProducer(rdb, nil, dedup.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	insp := asynq.NewInspectorFromRedisClient(rdb)
	var jobs []dedup.Job
	for i := range n {
		j := kind.Job(note{ID: fmt.Sprintf("n-%d", i)})
		if out, err := producer.Enqueue(ctx, j); err != nil || out.Decision != dedup.Enqueued {
			t.Fatalf("enqueue %d: %v %v", i, out.Decision, err)
		}
		jobs = append(jobs, j)
	}
	for i, j := range jobs {
		st, err := producer.Wait(ctx, j, 20*time.Second)
		want := fmt.Sprintf("noted n-%d", i)
		if err != nil || st.State != dedup.StatusDone || st.Result.String() != fmt.Sprintf("%q", want) {
			t.Fatalf("job %d: %s %s %v; want done with %s", i, st.State, st.Result, err, want)
		}
		// Only a type shown on the dashboard keeps its completed task, and
		// a joined acknowledgement keeps it without the payload and without
		// onceq's fields; the record answers the repeat below either way.
		// A completion sent alone lands just before asynq's acknowledgement,
		// so a task may still be pending its acknowledgement when Wait sees
		// done: tasks that are not shown are checked once the worker stopped.
		if task := "asynq:{default}:t:" + j.Key.TaskID(); shown && !forgetAck {
			if f, err := rdb.HMGet(ctx, task, "onceq_rec", "onceq_fp").Result(); err != nil || f[0] != nil || f[1] != nil {
				t.Errorf("job %d: task hash still has onceq's fields %v (%v)", i, f, err)
			} else if info, err := insp.GetTaskInfo("default", j.Key.TaskID()); err != nil || len(info.Payload) != 0 ||
				info.Type != kind.Type || info.State != asynq.TaskStateCompleted || info.Headers["onceq-fp"] != j.Fingerprint ||
				string(info.Result) != fmt.Sprintf("%q", want) {
				t.Errorf("job %d: retained task %+v (%v), want it completed with its result, without its payload, headers kept", i, info, err)
			}
		}
		again, err := producer.Enqueue(ctx, j)
		if err != nil || again.Decision != dedup.Duplicate || string(again.Result) != fmt.Sprintf("%q", want) {
			t.Errorf("repeat %d: %s %s %v; want duplicate with %s", i, again.Decision, again.Result, err, want)
		}
	}
	jobCalls := calls.total()
	// A task plain asynq code enqueued (no retention, so asynq's
	// acknowledgement deletes it) is claimed by the middleware itself and
	// still completed inside the acknowledgement.
	if _, err := asynq.NewClientFromRedisClient(rdb).Enqueue(asynq.NewTask(kind.Type, []byte(`{"id":"plain"}`))); err != nil {
		t.Fatal(err)
	}
	if st, err := producer.Wait(ctx, kind.Job(note{ID: "plain"}), 20*time.Second); err != nil || st.State != dedup.StatusDone {
		t.Fatalf("plain task: %s %v; want done", st.State, err)
	}
	shutdown()
	for i, j := range jobs {
		if shown {
			break
		}
		if kept, err := rdb.Exists(ctx, "asynq:{default}:t:"+j.Key.TaskID()).Result(); err != nil || kept != 0 {
			t.Errorf("job %d: completed task kept (%d, %v), want it deleted as it completed", i, kept, err)
		}
	}
	for id, r := range runs {
		if r != 1 {
			t.Errorf("%s ran %d times", id, r)
		}
	}
	if len(runs) != n+1 {
		t.Errorf("%d of %d jobs ran", len(runs), n+1)
	}
	t.Logf("record commands of the worker's own: %v", calls.n)
	return float64(jobCalls) / float64(n), rec.Events()
}

func joinEvents(events []dedup.Event) []dedup.Event {
	var out []dedup.Event
	for _, e := range events {
		if e.Op == "join" {
			out = append(out, e)
		}
	}
	return out
}

// The claim rides asynq's dequeue and the completion its acknowledgement:
// the worker sends no command of its own on a record, so a task costs the
// two round trips of bare asynq. This fails as soon as go.mod's asynq
// sends a dequeue or acknowledgement script other than lua/asynq's.
func TestJoinedScripts(t *testing.T) {
	t.Parallel()
	for name, shown := range map[string]bool{"deleted as completed": false, "kept for the dashboard": true} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			perJob, events := joinRun(t, 30, false, false, shown)
			if perJob != 0 {
				t.Errorf("%.2f record commands of the worker's own per job, want 0: claim and completion rode asynq's scripts", perJob)
			}
			if e := joinEvents(events); len(e) != 0 {
				t.Errorf("join events %v, want none", e)
			}
		})
	}
}

// An asynq that sends another dequeue script: the join turns itself off
// with one event (off: not an error that feeds alerts), and every job still
// runs once, by separate calls (a claim and a completion each).
func TestJoinFallsBackOnUnknownDequeue(t *testing.T) {
	t.Parallel()
	perJob, events := joinRun(t, 20, true, true, false)
	if perJob != 2 {
		t.Errorf("%.2f record commands per job, want 2 (claim, complete)", perJob)
	}
	e := joinEvents(events)
	if len(e) != 1 || e[0].Outcome != "off" || !strings.Contains(e[0].Reason, "calls of their own") {
		t.Errorf("join events %v, want one, off, saying claims go separately", e)
	}
}

// An asynq whose acknowledgement onceq does not know: the claim still rides
// the dequeue, the completion goes alone just before asynq's
// acknowledgement.
func TestJoinFallsBackOnUnknownAck(t *testing.T) {
	t.Parallel()
	perJob, _ := joinRun(t, 20, false, true, true)
	if perJob != 1 {
		t.Errorf("%.2f record commands per job, want 1 (complete)", perJob)
	}
}
