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

// usedMemory is Redis's used_memory less its clients' buffers, which
// follow the traffic of the moment, not what the keys hold. The slow log
// (long script calls keep their arguments there) is emptied first.
func usedMemory(t *testing.T, rdb redis.UniversalClient) int64 {
	t.Helper()
	if err := rdb.Do(context.Background(), "SLOWLOG", "RESET").Err(); err != nil {
		t.Fatal(err)
	}
	v, err := rdb.Do(context.Background(), "MEMORY", "STATS").Result()
	if err != nil {
		t.Fatal(err)
	}
	stat := func(name string) int64 {
		switch m := v.(type) {
		case map[any]any: // RESP3
			n, _ := m[name].(int64)
			return n
		case []any:
			for i := 0; i+1 < len(m); i += 2 {
				if m[i] == name {
					n, _ := m[i+1].(int64)
					return n
				}
			}
		}
		t.Fatalf("no %s in MEMORY STATS %v", name, v)
		return 0
	}
	return stat("total.allocated") - stat("clients.normal")
}

// Issue 42: a purge gives back the memory its keys took (within 5 %), and
// every purged key is accepted again. Memory is MEMORY STATS'
// total.allocated (INFO's used_memory) less the clients' buffers.
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
	before := usedMemory(t, rdb)

	// Three quarters run and are done; the rest wait an hour.
	done := n * 3 / 4
	send(kind, 0, done, dedup.Enqueued)
	drained()
	send(kind, done, n, dedup.Enqueued, asynq.ProcessIn(time.Hour))
	send(kind, 0, n, dedup.Duplicate)
	full := usedMemory(t, rdb)

	purged, err := p.Purge(ctx, kind.Type)
	if err != nil {
		t.Fatal(err)
	}
	if purged < n {
		t.Fatalf("purge deleted %d records and tasks, want at least %d", purged, n)
	}
	if left, err := rdb.Keys(ctx, "onceq:{purge:*").Result(); err != nil || len(left) != 0 {
		t.Fatalf("keys left after the purge: %d %v (%.3q)", len(left), err, left)
	}
	// Redis shrinks its emptied hash tables in its cron: wait for it.
	var after int64
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		after = usedMemory(t, rdb)
		if d := after - before; d <= before/20 && -d <= before/20 || time.Now().After(deadline) {
			break
		}
	}
	t.Logf("memory less client buffers: %d before, %d with %d keys, %d after the purge", before, full, n, after)
	if d := after - before; d > before/20 || -d > before/20 {
		t.Fatalf("memory %d after the purge, %d before: more than 5%% apart", after, before)
	}
	send(kind, 0, n, dedup.Enqueued)
}
