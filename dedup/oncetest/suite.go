package oncetest

import (
	"context"
	"testing"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/internal/storerule"
	"github.com/onceq/onceq/dedup/storage"
)

// NewStoreFunc makes a Store for TestStore: new and empty, built with opts
// (its Observer included: the suite counts the events), or the error
// dedup.NewRedisStore returns for those opts.
type NewStoreFunc func(t *testing.T, opts storage.Options) (storage.Store, error)

// TestStore runs the storage.Store contract against the stores newStore
// makes: claim outcomes, fencing, re-entrant claims, TTLs, limits, windows
// and events. RedisStore and this package's Store both pass it; a Store
// that passes it can stand in for them. Subtests run in parallel, and each
// asks newStore for a store of its own. Leases and TTLs are a few tens of
// milliseconds, waited for by polling Status: a store on a clock that does
// not move by itself cannot pass.
func TestStore(t *testing.T, newStore NewStoreFunc) {
	t.Helper()
	st := suite{newStore: newStore}
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, st suite)
	}{
		{"ClaimLifecycle", testClaimLifecycle},
		{"ReleaseAllowsNextClaim", testReleaseAllowsNextClaim},
		{"ConcurrentClaimsOneWinner", testConcurrentClaimsOneWinner},
		{"Mismatch", testMismatch},
		{"OtherFingerprintTakesOverFailedOrExpired", testOtherFingerprintTakesOverFailedOrExpired},
		{"ReentrantClaimSameDeliveryOnly", testReentrantClaimSameDeliveryOnly},
		{"ClaimRejectsSeparator", testClaimRejectsSeparator},
		{"StaleWorkerFencedOut", testStaleWorkerFencedOut},
		{"SameTokenOtherOwnerFencedOut", testSameTokenOtherOwnerFencedOut},
		{"TokenGrowsAcrossExpiry", testTokenGrowsAcrossExpiry},
		{"ExtendKeepsLeaseAlive", testExtendKeepsLeaseAlive},
		{"ConcurrentRuns", testConcurrentRuns},
		{"CompleteDoneTTL", testCompleteDoneTTL},
		{"ResultTooLarge", testResultTooLarge},
		{"StatusAbsentAndForget", testStatusAbsentAndForget},
		{"Expiry", testExpiry},
		{"Defaults", testDefaults},
		{"Limits", testLimits},
		{"ReserveWindow", testReserveWindow},
		{"ForgetFreesWindow", testForgetFreesWindow},
		{"Events", testEvents},
		{"CancelledContext", testCancelledContext},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, st)
		})
	}
}

type suite struct{ newStore NewStoreFunc }

// fixture is one store of a subtest, with the events it reported.
type fixture struct {
	storage.Store
	rec *Recorder
	// grace is the FailedTTL: how long a running record outlives its lease.
	grace time.Duration
}

// open returns a new store with opts, its events recorded.
func (st suite) open(t *testing.T, opts storage.Options) *fixture {
	t.Helper()
	f := &fixture{rec: &Recorder{}, grace: opts.FailedTTL}
	if f.grace == 0 {
		f.grace = storerule.DefaultFailedTTL
	}
	opts.Observer = f.rec.Observe
	s, err := st.newStore(t, opts)
	if err != nil {
		t.Fatal(err)
	}
	f.Store = s
	return f
}

// waitLeaseEnd polls until the lease on k is over on the store's own clock:
// a running record outlives its lease by the grace alone, so its lease has
// ended once less than the grace is left. Strictly less: then also a window
// set before the record was written is gone.
func (f *fixture) waitLeaseEnd(t *testing.T, k dedup.Key) {
	t.Helper()
	waitFor(t, func() bool {
		r, err := f.Status(context.Background(), k)
		if err != nil {
			t.Fatal(err)
		}
		return r.State != dedup.StatusRunning || r.ExpiresIn < f.grace
	})
}

// waitGone polls until the store has forgotten k by itself (its TTL).
func (f *fixture) waitGone(t *testing.T, k dedup.Key) {
	t.Helper()
	waitFor(t, func() bool {
		r, err := f.Status(context.Background(), k)
		if err != nil {
			t.Fatal(err)
		}
		return r.State == dedup.StatusUnknown
	})
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
	if err != nil {
		t.Fatalf("claim %v: %v", k, err)
	}
	if c.Outcome != want {
		t.Fatalf("claim %v: outcome %v, want %v (%+v)", k, c.Outcome, want, c)
	}
	return c
}

// waitFor polls a condition the store makes true by itself (expiry).
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10s")
		}
	}
}
