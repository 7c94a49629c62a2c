package onceq_test

import (
	"context"
	"errors"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/internal/redistest"
)

// The guard is verified against one asynq release: bumping asynq in go.mod
// fails here until enqueue.go and lua/asynq are checked against the new release.
func TestEnqueueGuardPinnedToGoMod(t *testing.T) {
	mod, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*github\.com/hibiken/asynq (\S+)`).FindSubmatch(mod)
	if m == nil || string(m[1]) != onceq.GuardAsynqVersion {
		t.Fatalf("go.mod requires asynq %s, enqueue.go is verified for %s: re-read asynq's enqueueCmd/scheduleCmd and update both", m, onceq.GuardAsynqVersion)
	}
}

// The guard recognises the scripts go.mod's asynq sends for an enqueue and
// a scheduled enqueue; a new asynq release fails here until lua/asynq is
// checked against it. On a real redis-server: the guard is Lua.
func TestEnqueueGuardContract(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Client(t)
	client := asynq.NewClientFromRedisClient(onceq.GuardEnqueues(rdb))
	insp := asynq.NewInspectorFromRedisClient(rdb)
	k := onceq.Key{Namespace: "guard:test", ID: "k-1"}
	for _, opts := range [][]asynq.Option{{}, {asynq.ProcessIn(time.Hour)}} {
		gctx, g := onceq.GuardEnqueue(ctx, k, "", "pending", "scheduled")
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
	gctx, _ := onceq.GuardEnqueue(ctx, k, "")
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
	client := asynq.NewClientFromRedisClient(onceq.GuardEnqueues(rdb))
	k := onceq.Key{Namespace: "guard:test", ID: "cluster-1"}
	for i, replace := range [][]string{nil, {"pending"}} {
		gctx, g := onceq.GuardEnqueue(ctx, k, "", replace...)
		if _, err := client.EnqueueContext(gctx, asynq.NewTask("guard:test", []byte{byte('a' + i)}), asynq.TaskID(k.TaskID())); err != nil || !g.Ran {
			t.Fatalf("insert %d on a cluster: %v (guard ran: %v)", i, err, g.Ran)
		}
	}
	info, err := asynq.NewInspectorFromRedisClient(rdb).GetTaskInfo("default", k.TaskID())
	if err != nil || string(info.Payload) != "b" {
		t.Fatalf("task %+v (%v), want the replacement", info, err)
	}
}
