package oncetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/storage"
)

// A worker whose lease expired is fenced out: the next claim gets a larger
// token, and the stale holder can neither extend, complete nor release.
func testStaleWorkerFencedOut(t *testing.T, st suite) {
	ctx := context.Background()
	s := st.open(t, storage.Options{})
	rec := s.rec
	k := mustKey(t, "payment:charge", "pmt-3")

	stale := mustClaim(t, s, k, "fp", 30*time.Millisecond, dedup.Acquired)
	s.waitLeaseEnd(t, k)
	fresh := mustClaim(t, s, k, "fp", time.Minute, dedup.Acquired)
	if fresh.Hold.Token <= stale.Hold.Token || fresh.Attempt != 2 {
		t.Fatalf("takeover: token %d after %d, attempt %d", fresh.Hold.Token, stale.Hold.Token, fresh.Attempt)
	}
	if errs := s.Extend(ctx, time.Minute, stale.Hold); !errors.Is(errs[0], storage.ErrLeaseLost) {
		t.Fatalf("stale extend: %v", errs[0])
	}
	if err := s.Complete(ctx, stale.Hold, []byte("stale"), 0); !errors.Is(err, storage.ErrLeaseLost) {
		t.Fatalf("stale complete: %v, want ErrLeaseLost", err)
	}
	if err := s.Complete(ctx, fresh.Hold, []byte("fresh"), 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, stale.Hold, "stale"); !errors.Is(err, storage.ErrLeaseLost) {
		t.Fatalf("stale release after completion: %v", err)
	}
	r, _ := s.Status(ctx, k)
	if r.State != dedup.StatusDone || string(r.Result) != "fresh" {
		t.Fatalf("newer holder's result must stand: %+v", r)
	}
	if rec.Count("lease_lost") != 3 {
		t.Fatalf("observer saw %d lease_lost, want 3", rec.Count("lease_lost"))
	}
}

// The compare-and-set matches token and owner: a hold with the current token
// but another owner (two workers whose clocks gave the same µs across an
// expiry) writes nothing.
func testSameTokenOtherOwnerFencedOut(t *testing.T, st suite) {
	ctx := context.Background()
	s := st.open(t, storage.Options{})
	k := mustKey(t, "payment:charge", "twin")
	c := mustClaim(t, s, k, "fp", time.Minute, dedup.Acquired)
	twin := storage.Hold{Key: k, Token: c.Hold.Token, Owner: c.Hold.Owner + "x"}
	if err := s.Complete(ctx, twin, []byte("twin"), 0); !errors.Is(err, storage.ErrLeaseLost) {
		t.Fatalf("complete by a same-token twin: %v, want ErrLeaseLost", err)
	}
	if errs := s.Extend(ctx, time.Minute, twin); !errors.Is(errs[0], storage.ErrLeaseLost) {
		t.Fatalf("extend by a same-token twin: %v", errs[0])
	}
	if err := s.Complete(ctx, c.Hold, []byte("real"), 0); err != nil {
		t.Fatal(err)
	}
}

// Tokens keep growing after a record expired entirely, so a holder from a
// forgotten record can never match a new one.
func testTokenGrowsAcrossExpiry(t *testing.T, st suite) {
	ctx := context.Background()
	s := st.open(t, storage.Options{FailedTTL: time.Millisecond})
	k := mustKey(t, "email:send", "e-expire")
	old := mustClaim(t, s, k, "fp", 5*time.Millisecond, dedup.Acquired)
	if err := s.Forget(ctx, k); err != nil {
		t.Fatal(err)
	}
	c := mustClaim(t, s, k, "fp", time.Minute, dedup.Acquired)
	if c.Hold.Token <= old.Hold.Token || c.Attempt != 1 {
		t.Fatalf("new record: token %d (old %d), attempt %d", c.Hold.Token, old.Hold.Token, c.Attempt)
	}
	if err := s.Complete(ctx, old.Hold, nil, 0); !errors.Is(err, storage.ErrLeaseLost) {
		t.Fatalf("complete with a token from a forgotten record: %v", err)
	}
}

func testExtendKeepsLeaseAlive(t *testing.T, st suite) {
	ctx := context.Background()
	s := st.open(t, storage.Options{})
	k1, k2 := mustKey(t, "scan:file", "x1"), mustKey(t, "scan:file", "x2")
	c1 := mustClaim(t, s, k1, "", 40*time.Millisecond, dedup.Acquired)
	c2 := mustClaim(t, s, k2, "", 40*time.Millisecond, dedup.Acquired)
	// Claimed after c1 with the same lease and never extended: once its
	// lease ends, c1's would have too.
	unextended := mustKey(t, "scan:file", "x3")
	mustClaim(t, s, unextended, "", 40*time.Millisecond, dedup.Acquired)
	gone := storage.Hold{Key: mustKey(t, "scan:file", "never-claimed"), Token: 7}

	errs := s.Extend(ctx, time.Minute, c1.Hold, c2.Hold, gone)
	if errs[0] != nil || errs[1] != nil || !errors.Is(errs[2], storage.ErrLeaseLost) {
		t.Fatalf("extend: %v", errs)
	}
	s.waitLeaseEnd(t, unextended)
	ip := mustClaim(t, s, k1, "", time.Minute, dedup.InProgress)
	if time.Until(ip.LeaseUntil) < 50*time.Second {
		t.Fatalf("extended lease ends in %v, want about a minute", time.Until(ip.LeaseUntil))
	}
	mustClaim(t, s, k2, "", time.Minute, dedup.InProgress)
}

// Workers racing over a set of keys, each claiming, extending and
// finishing what it wins: every key is completed exactly once, by the
// holder of its last token, and no call fails.
func testConcurrentRuns(t *testing.T, st suite) {
	ctx := context.Background()
	s := st.open(t, storage.Options{})
	const workers = 8
	var keys []dedup.Key
	for i := range 16 {
		keys = append(keys, mustKey(t, "t", fmt.Sprintf("race-%d", i)))
	}
	var mu sync.Mutex
	completed := map[dedup.Key][]string{}
	var wg sync.WaitGroup
	errs := make(chan error, 3*workers*len(keys))
	for w := range workers {
		wg.Go(func() {
			for i := range keys {
				k := keys[(i+w)%len(keys)]
				c, err := s.Claim(ctx, k, "fp", time.Minute, fmt.Sprintf("worker-%d", w))
				if err != nil || c.Outcome != dedup.Acquired {
					if err != nil {
						errs <- err
					}
					continue
				}
				if e := s.Extend(ctx, time.Minute, c.Hold); e[0] != nil {
					errs <- e[0]
				}
				if w%3 == 0 { // some fail first: the key is claimed again
					if err := s.Release(ctx, c.Hold, "flaky"); err != nil {
						errs <- err
					}
					continue
				}
				if err := s.Complete(ctx, c.Hold, []byte(c.Hold.Owner), 0); err != nil {
					errs <- err
					continue
				}
				mu.Lock()
				completed[k] = append(completed[k], c.Hold.Owner)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for k, by := range completed {
		if len(by) != 1 {
			t.Errorf("%v completed by %v, want exactly one", k, by)
		}
		if r, _ := s.Status(ctx, k); r.State != dedup.StatusDone || string(r.Result) != by[0] {
			t.Errorf("%v: %+v, want done by %s", k, r, by[0])
		}
	}
}
