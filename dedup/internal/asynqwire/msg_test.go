package asynqwire

import (
	"context"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup/oncetest/redistest"
)

// FailedAttempt edits only what asynq's Retry edits.
func TestFailedAttemptKeepsOtherFields(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Client(t)
	c := asynq.NewClientFromRedisClient(rdb)
	t.Cleanup(func() { c.Close() })
	info, err := c.EnqueueContext(ctx, asynq.NewTaskWithHeaders("edit:t", []byte(`{"a":1}`), map[string]string{"h": "v"}),
		asynq.TaskID("edit-1"), asynq.MaxRetry(2), asynq.Retention(time.Hour), asynq.Timeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	msg, err := rdb.HGet(ctx, "asynq:{default}:t:edit-1", "msg").Bytes()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1700000000, 0)
	for i, want := range []struct {
		retried int
		spent   bool
	}{{1, false}, {2, false}, {2, true}} {
		next, spent, err := FailedAttempt(msg, "boom "+string(rune('a'+i)), now)
		if err != nil || spent != want.spent {
			t.Fatalf("attempt %d: spent %v %v, want %v", i, spent, err, want.spent)
		}
		if err := rdb.HSet(ctx, "asynq:{default}:t:edit-1", "msg", next).Err(); err != nil {
			t.Fatal(err)
		}
		got, err := asynq.NewInspectorFromRedisClient(rdb).GetTaskInfo("default", "edit-1")
		if err != nil {
			t.Fatal(err)
		}
		if got.Retried != want.retried || got.LastErr != "boom "+string(rune('a'+i)) || !got.LastFailedAt.Equal(now) ||
			got.MaxRetry != 2 || got.Type != "edit:t" || string(got.Payload) != `{"a":1}` || got.Headers["h"] != "v" ||
			got.Timeout != time.Minute || got.Retention != time.Hour || got.ID != info.ID {
			t.Fatalf("attempt %d: %+v", i, got)
		}
		msg = next
	}
}
