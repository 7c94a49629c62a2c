package dedup_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/dedup/storage"
)

func newStore(t *testing.T, rdb redis.UniversalClient, opts storage.Options) (storage.Store, *oncetest.Recorder) {
	t.Helper()
	rec := &oncetest.Recorder{}
	opts.Observer = rec.Observe
	s, err := dedup.NewRedisStore(rdb, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s, rec
}

// fullRecords keeps a done record whole for the default done TTL: no
// compact marks, so a first claim is the plain SET (redis.go Claim).
var fullRecords = storage.Options{ResultTTL: 24 * time.Hour}

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
	if err != nil {
		t.Fatalf("claim %v: %v", k, err)
	}
	if c.Outcome != want {
		t.Fatalf("claim %v: outcome %v, want %v (%+v)", k, c.Outcome, want, c)
	}
	return c
}

// RedisStore on a real redis-server passes the Store contract suite, each
// subtest on a database of its own. What follows is what only Redis shows:
// its keys, its outages.
func TestRedisStoreContract(t *testing.T) {
	t.Parallel()
	oncetest.TestStore(t, func(t *testing.T, opts storage.Options) (storage.Store, error) {
		s, err := dedup.NewRedisStore(redistest.Client(t), opts)
		if err != nil {
			return nil, err
		}
		return s, nil
	})
}

func TestTTLs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Client(t)
	// TTLs long enough that all four keys still exist when listed on a
	// loaded machine (50 ms was not), short enough to wait out below.
	const ttl = 2 * time.Second
	s, _ := newStore(t, rdb, storage.Options{DoneTTL: ttl, FailedTTL: ttl})
	done, failed, running := mustKey(t, "t", "done"), mustKey(t, "t", "failed"), mustKey(t, "t", "running")
	// The producer of a type that keeps a history starts it at the enqueue.
	for _, k := range []dedup.Key{done, failed} {
		rdb.Set(ctx, dedup.RedisKey(k, "hist"), "enqueued", time.Second)
	}

	c := mustClaim(t, s, done, "", time.Minute, dedup.Acquired)
	if err := s.Complete(ctx, c.Hold, []byte("r"), 0); err != nil {
		t.Fatal(err)
	}
	c = mustClaim(t, s, failed, "", time.Minute, dedup.Acquired)
	if err := s.Release(ctx, c.Hold, "boom"); err != nil {
		t.Fatal(err)
	}
	mustClaim(t, s, running, "", 20*time.Millisecond, dedup.Acquired)
	if _, err := s.Reserve(ctx, mustKey(t, "t", "window"), ttl, "h"); err != nil {
		t.Fatal(err)
	}
	// Every key the engine wrote carries a TTL: three records, a window,
	// and the histories of the two runs that ended.
	keys, err := rdb.Keys(ctx, "*").Result()
	if err != nil || len(keys) != 6 {
		t.Fatalf("keys %v %v", keys, err)
	}
	for _, key := range keys {
		if ttl := rdb.PTTL(ctx, key).Val(); ttl <= 0 || ttl > 2*time.Minute {
			t.Errorf("key %s has TTL %v", key, ttl)
		}
	}
	// Running records outlive their lease by the grace (FailedTTL) only.
	// EXISTS expires lazily: active expiry may not visit this db for seconds.
	waitFor(t, func() bool { return rdb.Exists(ctx, keys...).Val() == 0 })
	mustClaim(t, s, done, "", time.Minute, dedup.Acquired)
}

// With Redis gone, every call is an error: never a panic, never a false Acquired.
func TestRedisDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: 1, DialTimeout: 200 * time.Millisecond, DialerRetries: 1})
	t.Cleanup(func() { rdb.Close() })
	s, rec := newStore(t, rdb, storage.Options{})
	k := mustKey(t, "t", "down")
	c := mustClaim(t, s, k, "", time.Minute, dedup.Acquired)
	srv.Stop()

	if c2, err := s.Claim(ctx, k, "", time.Minute, ""); err == nil || c2.Outcome == dedup.Acquired {
		t.Fatalf("claim with Redis down: %+v %v", c2, err)
	}
	if err := s.Complete(ctx, c.Hold, nil, 0); err == nil || errors.Is(err, storage.ErrLeaseLost) {
		t.Fatalf("complete with Redis down: %v", err)
	}
	if errs := s.Extend(ctx, time.Minute, c.Hold); errs[0] == nil {
		t.Fatal("extend with Redis down succeeded")
	}
	if _, err := s.Reserve(ctx, k, time.Minute, "h"); err == nil {
		t.Fatal("reserve with Redis down succeeded")
	}
	if _, err := s.Status(ctx, k); err == nil {
		t.Fatal("status with Redis down succeeded")
	}
	if rec.Count("error") < 4 {
		t.Fatalf("observer saw %d errors", rec.Count("error"))
	}
	rdb.Close() // stop the pool redialling a dead server for the rest of the run
}

// waitFor polls a condition that Redis makes true by itself (expiry).
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for range 500 {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("condition not met in 5s")
}
