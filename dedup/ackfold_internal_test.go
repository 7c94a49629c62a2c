package dedup

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/internal/redistest"
)

// The folded script returns asynq's own reply: an acknowledgement asynq's
// script refuses (the task is not on the active list) reaches asynq as that
// error, while the completion ahead of it is still recorded; a hold that
// is no longer current records nothing and acknowledges all the same.
func TestFoldedAckRepliesAsAsynq(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Client(t)
	s, err := NewRedisStore(rdb, Options{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMiddleware(s, MiddlewareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown(ctx)
	f := &ackFold{m: m, store: s, rdb: rdb, wait: time.Minute, pending: map[string]*pendingComplete{}}

	const done = "1241eaa1c73409baaf1fea0c08d203a4911bda15" // asynq v0.26.0 doneCmd
	keys := []string{"asynq:{q}:active", "asynq:{q}:lease", "asynq:{q}:t:gone", "asynq:{q}:processed:2026-11-30", "asynq:{q}:processed"}
	args := []any{"gone", time.Now().Add(time.Hour).Unix(), int64(1 << 62)}

	k := Key{Namespace: "email:send", ID: "fold-reply"}
	c, err := s.Claim(ctx, k, "fp", time.Minute)
	if err != nil || c.Outcome != Acquired {
		t.Fatalf("claim: %+v %v", c, err)
	}
	m.track(c.Hold, func(error) {})
	ack := f.send(ctx, &pendingComplete{h: c.Hold, result: []byte("sent")}, done, keys, args)
	if err := ack.Err(); err == nil || err.Error() != "NOT FOUND" {
		t.Fatalf("asynq's reply: %v, want its NOT FOUND", err)
	}
	if r, err := s.Status(ctx, k); err != nil || r.State != StateDone || string(r.Result) != "sent" {
		t.Fatalf("record: %+v %v, want done with the result", r, err)
	}
	if m.Active() != 0 {
		t.Fatal("the hold is still tracked after its completion was recorded")
	}

	// A stale hold: nothing recorded, asynq's script still runs.
	rdb.LPush(ctx, keys[0], "gone")
	rdb.ZAdd(ctx, keys[1], redis.Z{Score: 1, Member: "gone"})
	rdb.HSet(ctx, keys[2], "msg", "x")
	stale := c.Hold
	stale.Token--
	m.track(stale, func(error) {})
	if ack := f.send(ctx, &pendingComplete{h: stale}, done, keys, args); ack.Err() != nil || ack.Val() != "OK" {
		t.Fatalf("asynq's reply for a stale hold: %v %v, want OK", ack.Val(), ack.Err())
	}
	if n, _ := rdb.Exists(ctx, keys[2]).Result(); n != 0 {
		t.Fatal("asynq's acknowledgement did not run")
	}
	if r, _ := s.Status(ctx, k); string(r.Result) != "sent" {
		t.Fatalf("a stale hold overwrote the record: %+v", r)
	}
}
