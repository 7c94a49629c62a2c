package asynqwire

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup/oncetest/redistest"
)

// lua/promote.lua starts a successor as asynq's enqueue would have
// inserted it: the same hash (with the guard's two fields) and the same
// pending list, so asynq's dequeue, the joined claim and the Inspector see
// an ordinary enqueued task.
func TestPromoteIsAsynqsEnqueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Client(t)
	enqueue, _ := asynqScript("enqueue.lua")
	const id, msg, now = "k=1", "the message", int64(1700000000000000000)
	if err := redis.NewScript(enqueue).Run(ctx, rdb, []string{TaskKey("a", id), "asynq:{a}:pending"}, msg, id, now).Err(); err != nil {
		t.Fatal(err)
	}
	// The key's done record and completed task give way to the successor.
	rdb.Set(ctx, "onceq:{k/1}:rec", "d|1|o|1|1|fp-old|1|result", time.Minute)
	rdb.HSet(ctx, TaskKey("b", id), "msg", "old", "state", "completed")
	rdb.ZAdd(ctx, "asynq:{b}:completed", redis.Z{Score: 1, Member: id})
	rdb.HSet(ctx, "onceq:{k/1}:next", "msg", msg, "fp", "fp-new", "inc", "2")
	rdb.PExpire(ctx, "onceq:{k/1}:next", time.Hour)
	rdb.HSet(ctx, "onceq:successors", "k/1", "b")
	rdb.Set(ctx, "onceq:{k/1}:hist", "enqueued", time.Minute) // the producer's, which the worker adds to
	got, err := Sweep(ctx, rdb, "onceq:successors", []Waiting{{Field: "k/1", Queue: "b", ID: id,
		Record: "onceq:{k/1}:rec", Next: "onceq:{k/1}:next", History: "onceq:{k/1}:hist"}}, time.Unix(0, now), "head|worker||")
	if err != nil || len(got) != 1 || got[0] != 1 {
		t.Fatalf("sweep: %v %v, want [1]", got, err)
	}
	asynqs := rdb.HGetAll(ctx, TaskKey("a", id)).Val()
	ours := rdb.HGetAll(ctx, TaskKey("b", id)).Val()
	want := maps.Clone(asynqs)
	want["onceq_rec"], want["onceq_fp"], want["onceq_hist"], want["onceq_inc"] = "onceq:{k/1}:rec", "fp-new", "onceq:{k/1}:hist", "2"
	if !maps.Equal(ours, want) {
		t.Errorf("promoted hash %v, want asynq's %v with the guard's fields", ours, asynqs)
	}
	if a, b := rdb.LRange(ctx, "asynq:{a}:pending", 0, -1).Val(), rdb.LRange(ctx, "asynq:{b}:pending", 0, -1).Val(); len(b) != 1 || b[0] != a[0] {
		t.Errorf("pending %v, want asynq's %v", b, a)
	}
	for _, gone := range []string{"onceq:{k/1}:rec", "onceq:{k/1}:next", "asynq:{b}:completed"} {
		if n := rdb.Exists(ctx, gone).Val(); n != 0 {
			t.Errorf("%s still there", gone)
		}
	}
	if n := rdb.HLen(ctx, "onceq:successors").Val(); n != 0 {
		t.Errorf("successors hash keeps %d fields", n)
	}
	if h := rdb.Get(ctx, "onceq:{k/1}:hist").Val(); !strings.HasPrefix(h, "head|worker||e|2|") {
		t.Errorf("history %q, want the start of incarnation 2 from the worker", h)
	}
	if ttl := rdb.PTTL(ctx, "onceq:{k/1}:hist").Val(); ttl < 59*time.Minute {
		t.Errorf("history TTL %v, want the hour the successor could have waited", ttl)
	}
	// A key whose run goes on keeps its successor; one without one is dropped.
	rdb.HSet(ctx, TaskKey("c", id), "state", "active")
	rdb.HSet(ctx, "onceq:{k/2}:next", "msg", msg, "fp", "fp")
	rdb.HSet(ctx, "onceq:successors", "k/2", "c", "k/3", "c")
	got, err = Sweep(ctx, rdb, "onceq:successors", []Waiting{
		{Field: "k/2", Queue: "c", ID: id, Record: "onceq:{k/2}:rec", Next: "onceq:{k/2}:next", History: "onceq:{k/2}:hist"},
		{Field: "k/3", Queue: "c", ID: "k=3", Record: "onceq:{k/3}:rec", Next: "onceq:{k/3}:next", History: "onceq:{k/3}:hist"}},
		time.Unix(0, now), "head|worker||")
	if err != nil || len(got) != 2 || got[0] != -1 || got[1] != 0 {
		t.Errorf("sweep: %v %v, want [-1 0]", got, err)
	}
	if f := rdb.HKeys(ctx, "onceq:successors").Val(); len(f) != 1 || f[0] != "k/2" {
		t.Errorf("successors hash %v, want only k/2", f)
	}
}
