package oncetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/storage"
)

var epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func clockStore(t *testing.T, opts storage.Options) (*Store, *Clock) {
	t.Helper()
	c := NewClock(epoch)
	s, err := NewStoreWithClock(opts, c.Now)
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}

// On a Clock, a lease ends exactly when the clock says: not a moment
// before, and then the next claim takes over and fences the old holder.
func TestLeaseEndsOnTheClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, clock := clockStore(t, storage.Options{})
	k := dedup.Key{Namespace: "payment:charge", ID: "clock"}

	old := mustClaim(t, s, k, "fp", time.Minute, dedup.Acquired)
	if !old.LeaseUntil.Equal(epoch.Add(time.Minute)) {
		t.Fatalf("lease until %v, want %v", old.LeaseUntil, epoch.Add(time.Minute))
	}
	clock.Advance(time.Minute - time.Millisecond)
	if ip := mustClaim(t, s, k, "fp", time.Minute, dedup.InProgress); !ip.LeaseUntil.Equal(epoch.Add(time.Minute)) {
		t.Fatalf("in progress until %v, want %v", ip.LeaseUntil, epoch.Add(time.Minute))
	}
	r, _ := s.Status(ctx, k)
	if r.ExpiresIn != time.Hour+time.Millisecond || !r.LeaseUntil.Equal(epoch.Add(time.Minute)) {
		t.Fatalf("running record: %+v, want lease until %v and the grace left after it", r, epoch.Add(time.Minute))
	}
	clock.Advance(time.Millisecond)
	fresh := mustClaim(t, s, k, "fp", time.Minute, dedup.Acquired)
	if fresh.Attempt != 2 || fresh.Hold.Token <= old.Hold.Token {
		t.Fatalf("takeover: %+v after %+v", fresh, old)
	}
	if err := s.Complete(ctx, old.Hold, nil, 0); !errors.Is(err, storage.ErrLeaseLost) {
		t.Fatalf("stale complete: %v", err)
	}
}

// Done, failed and window TTLs run on the Clock too, to the nanosecond.
func TestTTLsOnTheClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, clock := clockStore(t, storage.Options{})
	done, failed, win := dedup.Key{Namespace: "t", ID: "done"}, dedup.Key{Namespace: "t", ID: "failed"}, dedup.Key{Namespace: "t", ID: "win"}

	c := mustClaim(t, s, done, "", time.Minute, dedup.Acquired)
	if err := s.Complete(ctx, c.Hold, []byte("ok"), 0); err != nil {
		t.Fatal(err)
	}
	c = mustClaim(t, s, failed, "", time.Minute, dedup.Acquired)
	if err := s.Release(ctx, c.Hold, "boom"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Reserve(ctx, win, 30*time.Second, "a"); err != nil {
		t.Fatal(err)
	}
	clock.Advance(10 * time.Second)
	if r, _ := s.Reserve(ctx, win, time.Minute, "b"); r.Reserved || r.RetryAfter != 20*time.Second {
		t.Fatalf("window: %+v, want held for 20s more", r)
	}
	if r, _ := s.Status(ctx, done); r.ExpiresIn != 24*time.Hour-10*time.Second || !r.CompletedAt.Equal(epoch) {
		t.Fatalf("done record: %+v", r)
	}
	clock.Advance(20 * time.Second)
	if r, _ := s.Reserve(ctx, win, time.Minute, "b"); !r.Reserved {
		t.Fatalf("window past its end: %+v", r)
	}
	clock.Advance(time.Hour - 30*time.Second)
	if r, _ := s.Status(ctx, failed); r.State != dedup.StatusUnknown {
		t.Fatalf("failed record past its TTL: %+v", r)
	}
	clock.Advance(23 * time.Hour)
	if r, _ := s.Status(ctx, done); r.State != dedup.StatusUnknown {
		t.Fatalf("done record past its TTL: %+v", r)
	}
}

// Nothing grows forever: keys nobody asks about again are dropped as the
// store is written to, so it holds about what is live.
func TestExpiredEntriesAreDropped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, clock := clockStore(t, storage.Options{DoneTTL: time.Second})
	const perRound = 100
	for round := range 100 {
		for i := range perRound {
			k := dedup.Key{Namespace: "t", ID: fmt.Sprintf("%d-%d", round, i)}
			c := mustClaim(t, s, k, "", time.Minute, dedup.Acquired)
			if err := s.Complete(ctx, c.Hold, nil, 0); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Reserve(ctx, k, time.Second, "h"); err != nil {
				t.Fatal(err)
			}
		}
		clock.Advance(2 * time.Second)
	}
	s.mu.Lock()
	n := len(s.records) + len(s.windows)
	s.mu.Unlock()
	if n > 6*perRound {
		t.Fatalf("%d entries held after 10000 keys expired, want at most a few rounds' worth", n)
	}
}

// The Observer runs outside the store's lock: it may call the store.
func TestObserverMayCallTheStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var s *Store
	seen := make(chan dedup.Status, 8)
	s, err := NewStore(storage.Options{Observer: func(ctx context.Context, e dedup.Event) {
		r, _ := s.Status(ctx, e.Key)
		seen <- r.State
	}})
	if err != nil {
		t.Fatal(err)
	}
	k := dedup.Key{Namespace: "t", ID: "observed"}
	c := mustClaim(t, s, k, "", time.Minute, dedup.Acquired)
	if err := s.Complete(ctx, c.Hold, nil, 0); err != nil {
		t.Fatal(err)
	}
	if a, b := <-seen, <-seen; a != dedup.StatusRunning || b != dedup.StatusDone {
		t.Fatalf("observer saw %s then %s", a, b)
	}
}
