package dedup_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/redistest"
)

// Records written by the first layout (a Redis hash) keep their meaning: a
// job done before the upgrade is still a duplicate, a live lease still
// blocks, and every record keeps its TTL.
func TestFirstLayoutRecordsUpgraded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Client(t)
	s, _ := newStore(t, rdb, dedup.Options{})
	now := time.Now().UnixMilli()
	hash := func(id string, ttl time.Duration, kv ...any) dedup.Key {
		k := mustKey(t, "email:send", id)
		key := "onceq:{" + k.String() + "}:rec"
		if err := rdb.HSet(ctx, key, kv...).Err(); err != nil {
			t.Fatal(err)
		}
		rdb.PExpire(ctx, key, ttl)
		return k
	}
	done := hash("old-done", time.Hour, "st", "done", "tok", "17", "own", "h/1", "att", "1", "fs", now, "fp", "fp1",
		"ua", now, "ca", now, "res", `{"sent":true}`)
	running := hash("old-running", 2*time.Hour, "st", "running", "tok", "18", "own", "h/1", "att", "2", "fs", now,
		"fp", "fp1", "ua", now, "lu", now+time.Minute.Milliseconds())
	failed := hash("old-failed", time.Hour, "st", "failed", "tok", "19", "own", "h/1", "att", "1", "fs", now,
		"fp", "fp1", "ua", now, "err", "boom")

	if c := mustClaim(t, s, done, "fp1", time.Minute, dedup.Duplicate); string(c.Result) != `{"sent":true}` {
		t.Fatalf("done before the upgrade: %+v", c)
	}
	mustClaim(t, s, done, "fp2", time.Minute, dedup.Mismatch)
	ip := mustClaim(t, s, running, "fp1", time.Minute, dedup.InProgress)
	if left := time.Until(ip.LeaseUntil); left < 50*time.Second || left > 61*time.Second || ip.Owner != "h/1" {
		t.Fatalf("running before the upgrade: %+v (lease left %v)", ip, left)
	}
	c := mustClaim(t, s, failed, "fp1", time.Minute, dedup.Acquired)
	if c.Attempt != 2 || c.Hold.Token <= 19 {
		t.Fatalf("failed before the upgrade: %+v", c)
	}
	if err := s.Complete(ctx, dedup.Hold{Key: running, Token: 18, Owner: "h/2"}, nil); !errors.Is(err, dedup.ErrLeaseLost) {
		t.Fatalf("another owner's token on an upgraded record: %v", err)
	}
	status := hash("old-status", time.Hour, "st", "done", "tok", "20", "own", "h/1", "att", "3", "fs", now, "fp", "fp1",
		"ua", now, "ca", now, "res", "r")
	r, err := s.Status(ctx, status)
	if err != nil || r.State != dedup.StateDone || string(r.Result) != "r" || r.Attempts != 3 || r.ExpiresIn <= 0 || r.ExpiresIn > time.Hour {
		t.Fatalf("status of a first-layout record: %+v %v", r, err)
	}
}
