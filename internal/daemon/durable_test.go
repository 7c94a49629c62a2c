package daemon_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/internal/daemon"
	"github.com/onceq/onceq/internal/redistest"
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
