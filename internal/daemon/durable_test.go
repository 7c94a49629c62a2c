package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/internal/daemon"
)

// replicated starts a master and one replica of it, in sync.
func replicated(t *testing.T) (master, replica *redistest.Server) {
	t.Helper()
	master = redistest.Start(t)
	host, port, _ := net.SplitHostPort(master.Addr)
	replica = redistest.Start(t, "--replicaof", host, port)
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, _ := replica.Client(t).Info(context.Background(), "replication").Result()
		if strings.Contains(info, "master_link_status:up") {
			return master, replica
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica never synced:\n%s", info)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// With the hook, a write returns only once the replica has it: single
// commands, pipelines and asynq's own scripts alike. Asking for more
// replicas than exist turns writes into ErrNotReplicated, which proves WAIT
// is sent (without it the write would just succeed).
func TestRequireReplicas(t *testing.T) {
	t.Parallel()
	master, replica := replicated(t)
	rdb := redis.NewClient(&redis.Options{Addr: master.Addr})
	t.Cleanup(func() { rdb.Close() })
	if err := daemon.RequireReplicas(rdb, 1, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rep := replica.Client(t)

	if err := rdb.Set(ctx, "single", "1", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, "piped", "1", time.Minute)
		p.Get(ctx, "single")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	info, err := asynq.NewClientFromRedisClient(rdb).Enqueue(asynq.NewTask("probe", nil), asynq.TaskID("durable-1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"single", "piped", "asynq:{default}:t:" + info.ID} {
		if n, err := rep.Exists(ctx, k).Result(); err != nil || n != 1 {
			t.Errorf("replica lacks %s right after the write returned (%d, %v)", k, n, err)
		}
	}
	if v, err := rdb.Get(ctx, "absent").Result(); !errors.Is(err, redis.Nil) || v != "" {
		t.Errorf("read of a missing key: %q %v, want redis.Nil", v, err)
	}

	strict := redis.NewClient(&redis.Options{Addr: master.Addr})
	t.Cleanup(func() { strict.Close() })
	if err := daemon.RequireReplicas(strict, 2, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := strict.Set(ctx, "under-replicated", "1", time.Minute).Err(); !errors.Is(err, daemon.ErrNotReplicated) {
		t.Fatalf("write with 2 replicas required and 1 present: %v, want ErrNotReplicated", err)
	}
	if err := strict.Get(ctx, "single").Err(); err != nil {
		t.Fatalf("reads need no replica: %v", err)
	}
}

// A write that failed its WAIT is on the master and maybe on no replica. A
// retry that only finds it (the refused duplicate of an enqueue) must fail
// too until a replica has it, or a failover loses a job the producer called
// accepted. The retry runs on connections of their own, whose last write a
// replica has: Redis's WAIT still covers what the master had when the
// retry's read-only script ran, and the producer must not turn that failed
// reply into a duplicate (it did, and CI's Sentinel run lost 2 jobs).
func TestWaitCoversWhatARetryFound(t *testing.T) {
	t.Parallel()
	master, replica := replicated(t)
	ctx := context.Background()
	type pay struct {
		ID string `json:"id"`
	}
	kind := dedup.Define(dedup.Spec[pay]{Type: "durable:pay", ID: func(p pay) string { return p.ID }})
	job := kind.Job(pay{ID: "p-1"})
	producer := func() *dedup.Producer { // each on connections of its own
		rdb := redis.NewClient(&redis.Options{Addr: master.Addr})
		t.Cleanup(func() { rdb.Close() })
		if err := daemon.RequireReplicas(rdb, 1, 300*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		return oncetest.NewProducer(t, rdb, nil, dedup.ProducerOptions{})
	}
	first, retry := producer(), producer()
	for i, p := range []*dedup.Producer{first, retry} { // asynq's first enqueue of a client also registers the queue
		if _, err := p.Enqueue(ctx, kind.Job(pay{ID: fmt.Sprint("warm-", i)})); err != nil {
			t.Fatal(err)
		}
	}

	if err := replica.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { replica.Resume() })
	// asynq passes Redis errors on as text.
	notReplicated := func(err error) bool {
		return err != nil && strings.Contains(err.Error(), daemon.ErrNotReplicated.Error())
	}
	if _, err := first.Enqueue(ctx, job); !notReplicated(err) {
		t.Fatalf("enqueue with the replica stopped: %v, want ErrNotReplicated", err)
	}
	if out, err := retry.Enqueue(ctx, job); !notReplicated(err) {
		t.Fatalf("retry with the replica still stopped: %s, %v; want ErrNotReplicated (no replica has the task it found)", out.Decision, err)
	}

	if err := replica.Resume(); err != nil {
		t.Fatal(err)
	}
	var out dedup.Outcome
	for deadline := time.Now().Add(30 * time.Second); ; { // until the replica has caught up
		var err error
		out, err = retry.Enqueue(ctx, job)
		if err == nil && out.Decision == dedup.Duplicate {
			break
		}
		if !notReplicated(err) || time.Now().After(deadline) {
			t.Fatalf("retry once the replica is back: %s, %v; want a duplicate", out.Decision, err)
		}
	}
	master.Stop() // kill -9; the replica takes over
	rep := replica.Client(t)
	if err := rep.ReplicaOf(ctx, "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := rep.Exists(ctx, "asynq:{"+out.Queue+"}:t:"+out.TaskID).Result(); err != nil || n != 1 {
		t.Errorf("the accepted job's task is not on the promoted replica (%d, %v)", n, err)
	}
}
