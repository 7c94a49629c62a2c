package dedup_test

import (
	"context"
	"testing"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/dedup/storage"
)

// compactStore keeps results for 100ms of a done TTL of done.
func compactStore(t *testing.T, done time.Duration) storage.Store {
	t.Helper()
	s, _ := newStore(t, redistest.Client(t), storage.Options{DoneTTL: done, ResultTTL: 100 * time.Millisecond})
	return s
}

// waitCompact waits until k's record has expired and its mark alone remembers it.
func waitCompact(t *testing.T, s storage.Store, k dedup.Key) storage.Record {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := s.Status(context.Background(), k)
		if err != nil {
			t.Fatal(err)
		}
		if r.Compact {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never compacted: %+v", k, r)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// After its result TTL a done key is still refused by the store's claim:
// the same content is a duplicate (without the result), other content a
// conflict, and Status says it is done, its result no longer kept.
func TestCompactClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := compactStore(t, time.Hour)
	k := mustKey(t, "email:send", "compact-1")
	c, err := s.Claim(ctx, k, "fp-a", time.Minute, "")
	if err != nil || c.Outcome != dedup.Acquired {
		t.Fatalf("claim: %+v, %v", c, err)
	}
	if err := s.Complete(ctx, c.Hold, []byte(`"sent"`), 0); err != nil {
		t.Fatal(err)
	}
	r := waitCompact(t, s, k)
	if r.State != dedup.StatusDone || r.Result != nil || time.Since(r.CompletedAt) > time.Minute {
		t.Errorf("status: %+v; want done, compact, no result", r)
	}
	again, err := s.Claim(ctx, k, "fp-a", time.Minute, "")
	if err != nil || again.Outcome != dedup.Duplicate || !again.Compact {
		t.Errorf("repeat: %+v, %v; want a compact duplicate", again, err)
	}
	other, err := s.Claim(ctx, k, "fp-b", time.Minute, "")
	if err != nil || other.Outcome != dedup.Conflict {
		t.Errorf("other content: %+v, %v; want a conflict", other, err)
	}
}

// The mark ends with the done TTL: the key is free again.
func TestCompactMarkExpires(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := compactStore(t, 1500*time.Millisecond)
	k := mustKey(t, "email:send", "compact-2")
	c, err := s.Claim(ctx, k, "fp-a", time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, c.Hold, nil, 0); err != nil {
		t.Fatal(err)
	}
	done := time.Now()
	waitCompact(t, s, k)
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := s.Claim(ctx, k, "fp-a", time.Minute, "")
		if err != nil {
			t.Fatal(err)
		}
		if c.Outcome == dedup.Acquired {
			if since := time.Since(done); since < 1500*time.Millisecond {
				t.Fatalf("acquired %v after completion, inside the done TTL", since)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still %+v long after the done TTL", c)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
