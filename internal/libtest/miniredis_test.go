package libtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/storage"
)

// The embedded default runs on miniredis: SET NX GET, the scripts and the
// PTTL-based lease work there too.
func TestStoreOnMiniredis(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	s := newStore(t, rdb, storage.Options{FailedTTL: time.Second})
	k := mustKey(t, "email:send", "mini")

	stale := mustClaim(t, s, k, "fp", time.Minute, dedup.Acquired)
	mustClaim(t, s, k, "fp", time.Minute, dedup.InProgress)
	mr.FastForward(time.Minute + time.Millisecond) // lease over, grace left
	fresh := mustClaim(t, s, k, "fp", time.Minute, dedup.Acquired)
	if fresh.Attempt != 2 || fresh.Hold.Token <= stale.Hold.Token {
		t.Fatalf("takeover: %+v", fresh)
	}
	if err := s.Complete(ctx, stale.Hold, nil, 0); !errors.Is(err, storage.ErrLeaseLost) {
		t.Fatalf("stale complete: %v", err)
	}
	if errs := s.Extend(ctx, time.Minute, fresh.Hold); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if err := s.Complete(ctx, fresh.Hold, []byte("sent"), 0); err != nil {
		t.Fatal(err)
	}
	if c := mustClaim(t, s, k, "fp", time.Minute, dedup.Duplicate); string(c.Result) != "sent" {
		t.Fatalf("duplicate result %q", c.Result)
	}
	mustClaim(t, s, k, "fp2", time.Minute, dedup.Conflict)
	if r, err := s.Status(ctx, k); err != nil || r.State != dedup.StatusDone || r.Attempts != 2 || r.ExpiresIn <= 23*time.Hour {
		t.Fatalf("status: %+v %v", r, err)
	}
}

func newStore(t *testing.T, rdb redis.UniversalClient, opts storage.Options) storage.Store {
	t.Helper()
	s, err := dedup.NewRedisStore(rdb, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustKey(t *testing.T, ns, id string) dedup.Key {
	t.Helper()
	k, err := dedup.NewKey(ns, id)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func mustClaim(t *testing.T, s storage.Store, k dedup.Key, fp string, lease time.Duration, want dedup.Decision) storage.Claim {
	t.Helper()
	c, err := s.Claim(context.Background(), k, fp, lease, "")
	if err != nil || c.Outcome != want {
		t.Fatalf("claim %v: %+v %v, want %v", k, c, err, want)
	}
	return c
}
