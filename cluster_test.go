package onceq_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/internal/redistest"
)

// The engine on a real Redis Cluster: every Lua call touches one slot (the
// {namespace/id} hash tag), and the pipelined Extend spans many slots.
func TestRedisCluster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: redistest.StartCluster(t)})
	t.Cleanup(func() { rdb.Close() })
	s, _ := newStore(t, rdb, onceq.StoreOptions{})

	var holds []onceq.Hold
	for i := range 50 { // 50 keys land on all three masters
		k := mustKey(t, "email:send", fmt.Sprintf("cluster-%d", i))
		c := mustClaim(t, s, k, "fp", time.Minute, onceq.Acquired)
		mustClaim(t, s, k, "fp", time.Minute, onceq.InProgress)
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
		if c := mustClaim(t, s, h.Key, "fp", time.Minute, onceq.Duplicate); string(c.Result) != "ok" {
			t.Fatalf("duplicate result %q", c.Result)
		}
	}
	stale := onceq.Hold{Key: holds[0].Key, Token: holds[0].Token - 1}
	if err := s.Complete(ctx, stale, nil, 0); !errors.Is(err, onceq.ErrLeaseLost) {
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
	mustClaim(t, s, holds[1].Key, "fp", time.Minute, onceq.Acquired)
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
}
