package dedup_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/dedup/storage"
)

// The engine on a real Redis Cluster: every Lua call touches one slot (the
// {namespace/id} hash tag), and the pipelined Extend spans many slots.
func TestRedisCluster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: redistest.StartCluster(t)})
	t.Cleanup(func() { rdb.Close() })
	s, _ := newStore(t, rdb, storage.Options{})

	var holds []storage.Hold
	for i := range 50 { // 50 keys land on all three masters
		k := mustKey(t, "email:send", fmt.Sprintf("cluster-%d", i))
		c := mustClaim(t, s, k, "fp", time.Minute, dedup.Acquired)
		mustClaim(t, s, k, "fp", time.Minute, dedup.InProgress)
		holds = append(holds, c.Hold)
	}
	for i, err := range s.Extend(ctx, time.Minute, holds...) {
		if err != nil {
			t.Fatalf("extend %v: %v", holds[i].Key, err)
		}
	}
	for _, h := range holds {
		if err := s.Complete(ctx, h, []byte("ok"), 0); err != nil {
			t.Fatal(err)
		}
		if c := mustClaim(t, s, h.Key, "fp", time.Minute, dedup.Duplicate); string(c.Result) != "ok" {
			t.Fatalf("duplicate result %q", c.Result)
		}
	}
	stale := storage.Hold{Key: holds[0].Key, Token: holds[0].Token - 1}
	if err := s.Complete(ctx, stale, nil, 0); !errors.Is(err, storage.ErrLeaseLost) {
		t.Fatalf("stale token on cluster: %v", err)
	}
	w := mustKey(t, "file_scan", "file-123")
	if r, err := s.Reserve(ctx, w, time.Minute, "a"); err != nil || !r.Reserved {
		t.Fatalf("reserve: %+v %v", r, err)
	}
	if r, _ := s.Reserve(ctx, w, time.Minute, "b"); r.Reserved || r.Holder != "a" {
		t.Fatalf("second reserve: %+v", r)
	}
	// Forget deletes the record and the window in one DEL: one slot.
	if err := s.Forget(ctx, holds[1].Key); err != nil {
		t.Fatal(err)
	}
	mustClaim(t, s, holds[1].Key, "fp", time.Minute, dedup.Acquired)
	var masters atomic.Int64 // ForEachMaster runs concurrently
	_ = rdb.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		if n, _ := c.DBSize(ctx).Result(); n > 0 {
			masters.Add(1)
		}
		return nil
	})
	if masters.Load() < 2 {
		t.Fatalf("keys landed on %d masters; the test proves nothing about slots", masters.Load())
	}

	// What cannot run on Cluster is said once, when the server is built,
	// at outcome off: not an error that feeds error-rate alerts.
	var mu sync.Mutex
	var events []dedup.Event
	if _, err := dedup.NewServer(rdb, s, asynq.Config{}, dedup.MiddlewareOptions{Observer: func(_ context.Context, e dedup.Event) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	}}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	ops := map[string]bool{}
	for _, e := range events {
		if e.Outcome != "off" {
			t.Errorf("event %+v on Cluster at start-up, want outcome off", e)
		}
		ops[e.Op] = true
	}
	// The fast recoverer and the join run on Cluster too (shard.go's
	// homes); only the successor policy does not.
	if !ops["successor"] || len(events) != 1 {
		t.Errorf("start-up events on Cluster %+v, want one, for the successor policy", events)
	}
}

// One job type on one queue spreads its load over a Cluster of 3
// masters: its jobs go to the queue's home queues (shard.go), whose slots
// lie on every master (the names are fixed, so this is checked, not
// hoped), and the commands every master served while a few thousand jobs
// were enqueued and processed are each within ±20 % of the mean (INFO
// commandstats; topology and stats commands left out).
func TestOneQueueSpreadsOverCluster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: redistest.StartCluster(t)})
	t.Cleanup(func() { rdb.Close() })
	invoices := shardedInvoices(1)
	homes := dedup.HomeQueues("default")
	masterOf := map[string]string{} // home queue -> master address
	for _, q := range homes {
		c, err := rdb.MasterForKey(ctx, "asynq:{"+q+"}:pending")
		if err != nil {
			t.Fatal(err)
		}
		masterOf[q] = c.Options().Addr
	}
	if held := slices.Compact(slices.Sorted(maps.Values(masterOf))); len(held) != 3 {
		t.Fatalf("the home queues' slots are on %d masters (%v); the test needs all 3", len(held), masterOf)
	}
	producer, runs := startSharded(t, rdb, invoices, 20, 0)
	var masters sync.Map // address -> *redis.Client, for stats
	_ = rdb.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		masters.Store(c.Options().Addr, c)
		return c.ConfigResetStat(ctx).Err() // our own servers
	})

	const n, producers = 3000, 6
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	for g := range producers {
		wg.Go(func() {
			for i := g; i < n; i += producers {
				out, err := producer.Enqueue(ctx, invoices.Job(Invoice{ID: fmt.Sprintf("inv-%d", i)}))
				if err == nil && out.Decision != dedup.Enqueued {
					err = fmt.Errorf("job %d: %s", i, out.Decision)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Done once no shard holds a pending or active task (two LLENs a
	// shard a look: asynq's Inspector would sample MEMORY USAGE too).
	deadline := time.Now().Add(60 * time.Second)
	for left := int64(n); left > 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d jobs not done after 60s", left, n)
		}
		left = 0
		for _, q := range homes {
			for _, state := range []string{"pending", "active"} {
				l, err := rdb.LLen(ctx, "asynq:{"+q+"}:"+state).Result()
				if err != nil {
					t.Fatal(err)
				}
				left += l
			}
		}
	}
	ran := 0
	runs.Range(func(k, v any) bool {
		ran++
		if *v.(*int64) != 1 {
			t.Errorf("%s ran %d times", k, *v.(*int64))
		}
		return true
	})
	if ran != n {
		t.Fatalf("%d jobs ran, want %d", ran, n)
	}

	calls := map[string]int{}
	total := 0
	masters.Range(func(addr, c any) bool {
		stats, err := c.(*redis.Client).Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		calls[addr.(string)] = commandCalls(stats)
		total += calls[addr.(string)]
		return true
	})
	mean := float64(total) / 3
	for _, addr := range slices.Sorted(maps.Keys(calls)) {
		share := float64(calls[addr]) / float64(total)
		t.Logf("master %s: %d commands, %.1f %% of %d (%.2f of the mean)", addr, calls[addr], 100*share, total, float64(calls[addr])/mean)
		if c := float64(calls[addr]); c < 0.8*mean || c > 1.2*mean {
			t.Errorf("master %s served %d commands, outside ±20 %% of the mean %.0f", addr, calls[addr], mean)
		}
	}
}

// commandCalls sums the calls of INFO commandstats, leaving out what the
// clients ask about the cluster and the test about the stats.
func commandCalls(stats string) int {
	total := 0
	for line := range strings.Lines(stats) {
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
		if !ok || name == "info" || name == "config|resetstat" || name == "config" || strings.HasPrefix(name, "cluster") {
			continue
		}
		n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
		total += n
	}
	return total
}

// A key's life on a 3-master Cluster, as on one Redis: its job goes to a
// home queue of its queue, the repeat of a done job is a duplicate with its
// result from the record alone (asynq kept no task), its history is kept,
// a rate rule in another home still throttles, a reset frees the key for a
// second incarnation in one step, and a purge leaves none of the type's
// keys on any master (the rule's window, taken by a call of its own in its
// own home, is left to expire, as Purge says).
func TestKeyLifeOnCluster(t *testing.T) {
	t.Parallel()
	kind := dedup.Define(dedup.Spec[resetPay]{Type: "cluster:pay", ID: func(p resetPay) string { return p.ID }, History: true,
		Rules: func(p resetPay) ([]*dedup.Rule, error) {
			return []*dedup.Rule{{Key: dedup.Key{Namespace: "cluster:acct", ID: p.Account}, Window: time.Hour}}, nil
		}})
	ctx := context.Background()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: redistest.StartCluster(t)})
	t.Cleanup(func() { rdb.Close() })
	catalog, err := dedup.NewCatalog(kind.Kind)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := dedup.NewServer(rdb, nil, asynq.Config{Concurrency: 2, LogLevel: asynq.FatalLevel},
		dedup.MiddlewareOptions{Catalog: catalog})
	if err != nil {
		t.Fatal(err)
	}
	mux := asynq.NewServeMux()
	mux.Handle(kind.Type, dedup.Handle(kind, func(_ context.Context, p resetPay) (string, error) {
		return "paid " + p.ID, nil
	}))
	if err := srv.Start(mux); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(ctx) })
	p, err := dedup.NewProducer(rdb, nil, dedup.ProducerOptions{Catalog: catalog})
	if err != nil {
		t.Fatal(err)
	}

	j := kind.Job(resetPay{"c-1", "acct-c"})
	out, err := p.Enqueue(ctx, j)
	if err != nil || out.Decision != dedup.Enqueued || !slices.Contains(dedup.ClusterQueues("default")[1:], out.Queue) {
		t.Fatalf("enqueue: %+v %v, want enqueued on a home queue of default", out, err)
	}
	if st, err := p.Wait(ctx, j, 20*time.Second); err != nil || st.State != dedup.StatusDone {
		t.Fatalf("wait: %+v %v", st, err)
	}
	if _, err := asynq.NewInspectorFromRedisClient(rdb).GetTaskInfo(out.Queue, j.Key.TaskID()); !errors.Is(err, asynq.ErrTaskNotFound) {
		t.Fatalf("completed task: %v, want none kept (the record refuses repeats)", err)
	}
	again := kind.Job(resetPay{"c-1", "acct-c"})
	if out, err := p.Enqueue(ctx, again); err != nil || out.Decision != dedup.Duplicate || string(out.Result) != `"paid c-1"` {
		t.Fatalf("repeat: %+v %v, want a duplicate with the result", out, err)
	}
	// The account's rule is in another home than c-3's key (checked, so the
	// call of its own is what throttles).
	other := kind.Job(resetPay{"c-3", "acct-c"})
	home := func(k dedup.Key) string { s, _, _ := strings.Cut(dedup.RedisKey(k, "x"), "}"); return s }
	if home(other.Key) == home(dedup.Key{Namespace: "cluster:acct", ID: "acct-c"}) {
		t.Fatal("the rule's key shares c-2's home; pick another id")
	}
	if out, err := p.Enqueue(ctx, other); err != nil || out.Decision != dedup.Throttled {
		t.Fatalf("same account: %+v %v, want throttled", out, err)
	}
	var got []string
	h, err := p.History(ctx, j.Key)
	for _, e := range h {
		got = append(got, string(e.Decision))
	}
	if err != nil || !slices.Equal(got, []string{"duplicate", "completed", "enqueued"}) {
		t.Fatalf("history %v %v, want duplicate, completed, enqueued", got, err)
	}

	if before, err := p.Reset(ctx, j.Key, false); err != nil || before.State != dedup.StatusDone {
		t.Fatalf("reset: %+v %v", before, err)
	}
	if out, err := p.Enqueue(ctx, again); err != nil || out.Decision != dedup.Enqueued || out.Incarnation != 2 {
		t.Fatalf("after the reset: %+v %v, want incarnation 2 enqueued", out, err)
	}
	if st, err := p.Wait(ctx, again, 20*time.Second); err != nil || st.State != dedup.StatusDone {
		t.Fatalf("wait: %+v %v", st, err)
	}
	if n, err := p.Purge(ctx, kind.Type); err != nil || n == 0 {
		t.Fatalf("purge: %d %v", n, err)
	}
	var left atomic.Int64
	err = rdb.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		keys, err := c.Keys(ctx, "onceq:{*}:cluster:pay/*").Result()
		left.Add(int64(len(keys)))
		return err
	})
	if err != nil || left.Load() != 0 {
		t.Fatalf("after the purge: %d keys of the type left, %v", left.Load(), err)
	}
}

// Compact marks on a 3-master Cluster: they sit in their key's home, so the
// completion writes one in its own step and the enqueue's guard and the
// worker's claim read it in theirs. After the result TTL a repeat is still
// a duplicate ("result no longer kept"), other content a conflict, and a
// task that reaches the worker anyway is acknowledged unrun.
func TestCompactOnCluster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: redistest.StartCluster(t)})
	t.Cleanup(func() { rdb.Close() })
	store, err := dedup.NewRedisStore(rdb, storage.Options{ResultTTL: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	kind := dedup.Define(dedup.Spec[memo]{Type: "compact:cluster", ID: func(m memo) string { return m.ID }})
	catalog, err := dedup.NewCatalog(kind.Kind)
	if err != nil {
		t.Fatal(err)
	}
	producer, err := dedup.NewProducer(rdb, store, dedup.ProducerOptions{Catalog: catalog})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := dedup.NewServer(rdb, store, asynq.Config{Concurrency: 2, LogLevel: asynq.FatalLevel},
		dedup.MiddlewareOptions{Catalog: catalog})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	mux := asynq.NewServeMux()
	mux.Handle(kind.Type, dedup.Handle(kind, func(context.Context, memo) (string, error) {
		runs.Add(1)
		return "noted", nil
	}))
	if err := srv.Start(mux); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })

	for _, id := range []string{"a", "b", "c", "d", "e", "f"} { // several homes, so several masters
		j := kind.Job(memo{ID: id, Text: "hello"})
		if out, err := producer.Enqueue(ctx, j); err != nil || out.Decision != dedup.Enqueued {
			t.Fatalf("first %s: %+v %v", id, out, err)
		}
		if st, err := producer.Wait(ctx, j, 20*time.Second); err != nil || st.State != dedup.StatusDone {
			t.Fatalf("wait %s: %+v %v", id, st, err)
		}
		waitCompact(t, store, j.Key)
		out, err := producer.Enqueue(ctx, j)
		if err != nil || out.Decision != dedup.Duplicate || !strings.Contains(out.Reason, "result no longer kept") {
			t.Fatalf("repeat %s: %+v %v; want a duplicate, result no longer kept", id, out, err)
		}
		if out, err := producer.Enqueue(ctx, kind.Job(memo{ID: id, Text: "other"})); err != nil || out.Decision != dedup.Conflict {
			t.Fatalf("other content %s: %+v %v; want a conflict", id, out, err)
		}
		// asynq's own enqueue, where a Cluster-aware client puts it: the
		// joined dequeue or the claim finds the mark.
		if _, err := asynq.NewClientFromRedisClient(rdb).Enqueue(j.Task, asynq.TaskID(j.Key.TaskID()),
			asynq.Queue(dedup.ClusterQueue("default", j.Key))); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, func() bool {
		n := 0
		for _, q := range dedup.ClusterQueues("default") {
			info, err := asynq.NewInspectorFromRedisClient(rdb).GetQueueInfo(q)
			if err == nil {
				n += info.Size
			}
		}
		return n == 0
	})
	if n := runs.Load(); n != 6 {
		t.Fatalf("%d runs, want 6: a compacted key ran again", n)
	}
}
