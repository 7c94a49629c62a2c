package dedup_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
)

type purgeJob struct {
	ID string `json:"id"`
	N  int    `json:"n"`
}

// purgeSpec: every fourth job takes a rate rule on an account of its own,
// a window in another namespace that only the job's key leads to.
func purgeSpec(typ string) *dedup.Typed[purgeJob] {
	return dedup.Define(dedup.Spec[purgeJob]{Type: typ, ID: func(p purgeJob) string { return p.ID },
		Rules: func(p purgeJob) ([]*dedup.Rule, error) {
			if p.N%4 != 0 {
				return nil, nil
			}
			return []*dedup.Rule{{Key: dedup.Key{Namespace: "purge:acct", ID: p.ID}, Window: time.Hour}}, nil
		}})
}

// keysMemory is what the keys of rdb's database hold in Redis: each key's
// MEMORY USAGE (every element counted) and the database's hash tables.
// Redis's used_memory also follows its clients' connections and buffers
// and the slow log, which move by a few hundred kB with the traffic of the
// moment (one CI run read 8 % less after the purge than before it).
func keysMemory(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	ctx := context.Background()
	var total int64
	iter := rdb.Scan(ctx, 0, "*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	cmds, _ := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range keys {
			p.MemoryUsage(ctx, k, 0)
		}
		return nil
	})
	for _, c := range cmds {
		if n, err := c.(*redis.IntCmd).Result(); err == nil {
			total += n // a key that expired since the scan holds nothing
		}
	}
	v, err := rdb.Do(ctx, "MEMORY", "STATS").Result()
	if err != nil {
		t.Fatal(err)
	}
	db := fmt.Sprintf("db.%d", rdb.Options().DB)
	var tables map[any]any
	switch m := v.(type) {
	case map[any]any: // RESP3
		tables, _ = m[db].(map[any]any)
	case []any:
		for i := 0; i+1 < len(m); i += 2 {
			if m[i] == db {
				if l, ok := m[i+1].([]any); ok {
					tables = map[any]any{}
					for j := 0; j+1 < len(l); j += 2 {
						tables[l[j]] = l[j+1]
					}
				}
			}
		}
	}
	for _, name := range []string{"overhead.hashtable.main", "overhead.hashtable.expires"} {
		n, ok := tables[name].(int64)
		if !ok {
			t.Fatalf("no %s of %s in MEMORY STATS %v", name, db, v)
		}
		total += n
	}
	return total
}

// Issue 42: a purge gives back the memory its keys took (within 5 %), and
// every purged key is accepted again. Memory is what the keys hold
// (keysMemory).
func TestPurgeGivesBackMemory(t *testing.T) {
	t.Parallel()
	n := 20000
	if testing.Short() {
		n = 2000
	}
	ctx := context.Background()
	// A server of its own: memory is the whole server's, and the shared
	// one serves the package's other tests in other databases.
	rdb := redistest.Start(t).Client(t)
	p, err := dedup.NewProducer(rdb, nil, dedup.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	warm, kind := purgeSpec("purge:warm"), purgeSpec("purge:job")
	srv, err := dedup.NewServer(rdb, nil, asynq.Config{Concurrency: 8}, dedup.MiddlewareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mux := asynq.NewServeMux()
	ok := func(context.Context, purgeJob) (string, error) { return "ok", nil }
	mux.Handle(warm.Type, dedup.Handle(warm, ok))
	mux.Handle(kind.Type, dedup.Handle(kind, ok))
	if err := srv.Start(mux); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	insp := asynq.NewInspectorFromRedisClient(rdb)

	// send enqueues jobs from..to of typ from 8 goroutines, each with opts.
	send := func(typ *dedup.Typed[purgeJob], from, to int, want dedup.Decision, opts ...asynq.Option) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for w := range 8 {
			wg.Go(func() {
				for i := from + w; i < to; i += 8 {
					out, err := p.Enqueue(ctx, typ.Job(purgeJob{ID: fmt.Sprintf("k-%d", i), N: i}), opts...)
					if err == nil && out.Decision != want {
						err = fmt.Errorf("k-%d: %+v, want %s", i, out, want)
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
	}
	drained := func() {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for {
			q, err := insp.GetQueueInfo("default")
			if err == nil && q.Pending == 0 && q.Active == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("queue not drained: %+v %v", q, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// Warm up what stays: scripts loaded, the server's keys, connections.
	send(warm, 0, 64, dedup.Enqueued)
	drained()
	if _, err := p.Purge(ctx, warm.Type); err != nil {
		t.Fatal(err)
	}
	before := keysMemory(t, rdb)

	// Three quarters run and are done; the rest wait an hour.
	done := n * 3 / 4
	send(kind, 0, done, dedup.Enqueued)
	drained()
	send(kind, done, n, dedup.Enqueued, asynq.ProcessIn(time.Hour))
	send(kind, 0, n, dedup.Duplicate)
	full := keysMemory(t, rdb)

	purged, err := p.Purge(ctx, kind.Type)
	if err != nil {
		t.Fatal(err)
	}
	if purged < n {
		t.Fatalf("purge deleted %d records and tasks, want at least %d", purged, n)
	}
	if left, err := rdb.Keys(ctx, "onceq:{*}:purge:*").Result(); err != nil || len(left) != 0 {
		t.Fatalf("keys left after the purge: %d %v (%.3q)", len(left), err, left)
	}
	// Redis shrinks its emptied hash tables in its cron: wait for it. What
	// the keys took must come back to within 5 % of it: the keys and
	// every table that grew for them.
	took := full - before
	var after int64
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		after = keysMemory(t, rdb)
		if after-before <= took/20 || time.Now().After(deadline) {
			break
		}
	}
	t.Logf("memory of the keys: %d before, %d with %d keys, %d after the purge", before, full, n, after)
	if after-before > took/20 {
		t.Fatalf("memory %d after the purge, %d before: more than 5%% of the %d the keys took is still held", after, before, took)
	}
	send(kind, 0, n, dedup.Enqueued)
}
