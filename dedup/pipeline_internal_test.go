package dedup

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup/internal/asynqwire"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/dedup/storage"
)

// asynq's enqueue script sent on a pipeline or in a transaction, as asynq's
// BatchEnqueue (after v0.26.0) sends it, still runs behind the guard: a key
// whose record is done is refused in the insert's step, a new key is
// inserted with its record key kept, and a task the guard cannot vouch for
// (another job's, or a script it does not know) is refused, never inserted
// unguarded.
func TestGuardAppliesOnPipelines(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Client(t)
	store, err := NewRedisStore(rdb, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	asynqwire.Intercept(rdb)
	done, _ := NewKey("pipe:t", "done")
	c, err := store.Claim(ctx, done, "fp", time.Minute, "")
	if err != nil || c.Outcome != Acquired {
		t.Fatalf("claim: %+v %v", c, err)
	}
	if err := store.Complete(ctx, c.Hold, []byte(`"ok"`), 0); err != nil {
		t.Fatal(err)
	}
	fresh, _ := NewKey("pipe:t", "fresh")
	// insert queues asynq's own enqueue call for k on pl.
	insert := func(ctx context.Context, pl redis.Pipeliner, sha string, k Key) *redis.Cmd {
		id := k.TaskID()
		return pl.EvalSha(ctx, sha, []string{asynqwire.TaskKey("default", id), "asynq:{default}:pending"},
			"msg-"+id, id, time.Now().UnixNano())
	}
	enqueueSHA := asynqwire.SHA("enqueue.lua")
	for _, tx := range []bool{false, true} {
		for _, tc := range []struct {
			name    string
			key     Key
			sha     string
			other   bool // the pipeline inserts another job's task too
			want    int64
			wantErr bool
		}{
			{name: "done record refuses", key: done, sha: enqueueSHA, want: 0},
			{name: "new key inserted", key: fresh, sha: enqueueSHA, want: 1},
			{name: "unknown script refused", key: fresh, sha: "0123456789abcdef0123456789abcdef01234567", wantErr: true},
			{name: "another job's task refused", key: fresh, sha: enqueueSHA, other: true, want: 1},
		} {
			rdb.Del(ctx, asynqwire.TaskKey("default", fresh.TaskID()), asynqwire.TaskKey("default", "stranger"))
			gctx, g := guardEnqueue(ctx, tc.key, "fp", false)
			pl := rdb.Pipeline()
			if tx {
				pl = rdb.TxPipeline()
			}
			cmd := insert(gctx, pl, tc.sha, tc.key)
			var stranger *redis.Cmd
			if tc.other {
				stranger = pl.EvalSha(gctx, enqueueSHA, []string{asynqwire.TaskKey("default", "stranger"), "asynq:{default}:pending"},
					"msg-stranger", "stranger", time.Now().UnixNano())
			}
			_, _ = pl.Exec(gctx)
			name := tc.name
			if tx {
				name += " (transaction)"
			}
			if tc.wantErr {
				if !errors.Is(cmd.Err(), asynqwire.ErrUnguarded) {
					t.Errorf("%s: %v %v, want ErrUnguarded", name, cmd.Val(), cmd.Err())
				}
			} else if n, err := cmd.Int64(); err != nil || n != tc.want || !g.Ran {
				t.Errorf("%s: asynq heard %d %v (guard ran: %v), want %d", name, n, err, g.Ran, tc.want)
			}
			rec, _ := rdb.HGet(ctx, asynqwire.TaskKey("default", fresh.TaskID()), "onceq_rec").Result()
			if inserted := rec == recordKey(fresh); inserted != (tc.key == fresh && tc.want == 1 && !tc.wantErr) {
				t.Errorf("%s: the task's hash names its record: %v", name, inserted)
			}
			if stranger != nil {
				if stranger.Err() == nil || rdb.Exists(ctx, asynqwire.TaskKey("default", "stranger")).Val() != 0 {
					t.Errorf("%s: another job's task under this guard: %v %v, want refused and not inserted", name, stranger.Val(), stranger.Err())
				}
			}
		}
	}
	if n := rdb.Exists(ctx, asynqwire.TaskKey("default", done.TaskID())).Val(); n != 0 {
		t.Errorf("the done key got a task")
	}
}
