package oncetest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/storage"
)

func testClaimLifecycle(t *testing.T, st suite) {
	ctx := context.Background()
	s := st.open(t, storage.Options{})
	rec := s.rec
	k := mustKey(t, "email:send", "welcome-1")

	c := mustClaim(t, s, k, "fp1", time.Minute, dedup.Acquired)
	if c.Attempt != 1 || c.Hold.Token <= 0 {
		t.Fatalf("first claim: attempt %d token %d", c.Attempt, c.Hold.Token)
	}
	ip := mustClaim(t, s, k, "fp1", time.Minute, dedup.InProgress)
	if !ip.LeaseUntil.After(time.Now().Add(30 * time.Second)) {
		t.Fatalf("in progress lease ends %v, want about a minute from now", ip.LeaseUntil)
	}
	if ip.Owner == "" {
		t.Fatal("in progress: no owner reported")
	}
	if err := s.Complete(ctx, c.Hold, []byte(`{"message_id":"m1"}`), 0); err != nil {
		t.Fatal(err)
	}
	dup := mustClaim(t, s, k, "fp1", time.Minute, dedup.Duplicate)
	if string(dup.Result) != `{"message_id":"m1"}` || dup.CompletedAt.IsZero() {
		t.Fatalf("duplicate: result %q completed %v", dup.Result, dup.CompletedAt)
	}
	r, err := s.Status(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if r.State != dedup.StatusDone || r.Attempts != 1 || r.Fingerprint != "fp1" || r.FirstSeen.IsZero() ||
		r.CompletedAt.Before(r.FirstSeen) || r.ExpiresIn <= 23*time.Hour {
		t.Fatalf("status after complete: %+v", r)
	}
	for o, want := range map[dedup.Decision]int{
		dedup.Acquired: 1, dedup.InProgress: 1, storage.Completed: 1, dedup.Duplicate: 1,
	} {
		if got := rec.Count(o); got != want {
			t.Errorf("observer saw %d %s, want %d", got, o, want)
		}
	}
}

func testReleaseAllowsNextClaim(t *testing.T, st suite) {
	ctx := context.Background()
	s := st.open(t, storage.Options{})
	k := mustKey(t, "payment:charge", "pmt-1")

	c1 := mustClaim(t, s, k, "fp", time.Minute, dedup.Acquired)
	if err := s.Release(ctx, c1.Hold, "gateway timeout"); err != nil {
		t.Fatal(err)
	}
	r, err := s.Status(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if r.State != dedup.StatusFailed || r.Error != "gateway timeout" || r.ExpiresIn > time.Hour {
		t.Fatalf("status after release: %+v", r)
	}
	c2 := mustClaim(t, s, k, "fp", time.Minute, dedup.Acquired)
	if c2.Attempt != 2 || c2.Hold.Token <= c1.Hold.Token {
		t.Fatalf("second claim: attempt %d token %d (first %d)", c2.Attempt, c2.Hold.Token, c1.Hold.Token)
	}
	// The old token is dead: releasing or completing with it changes nothing.
	if err := s.Release(ctx, c1.Hold, "late"); !errors.Is(err, storage.ErrLeaseLost) {
		t.Fatalf("stale release: %v, want ErrLeaseLost", err)
	}
	if err := s.Complete(ctx, c2.Hold, nil, 0); err != nil {
		t.Fatal(err)
	}
	if r, _ := s.Status(ctx, k); r.State != dedup.StatusDone || r.Attempts != 2 || r.Error != "" {
		t.Fatalf("status after second run: %+v", r)
	}
}

func testConcurrentClaimsOneWinner(t *testing.T, st suite) {
	ctx := context.Background()
	s := st.open(t, storage.Options{})
	k := mustKey(t, "scan:file", "doc-1")

	const n = 64
	var wg sync.WaitGroup
	outcomes := make([]dedup.Decision, n)
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			c, err := s.Claim(ctx, k, "fp", time.Minute, "")
			outcomes[i], errs[i] = c.Outcome, err
		})
	}
	close(start)
	wg.Wait()
	acquired := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		switch outcomes[i] {
		case dedup.Acquired:
			acquired++
		case dedup.InProgress:
		default:
			t.Fatalf("claim %d: %v", i, outcomes[i])
		}
	}
	if acquired != 1 {
		t.Fatalf("%d of %d concurrent claims acquired, want exactly 1", acquired, n)
	}
}

func testMismatch(t *testing.T, st suite) {
	ctx := context.Background()
	s := st.open(t, storage.Options{})
	rec := s.rec
	k := mustKey(t, "payment:charge", "pmt-2")

	c := mustClaim(t, s, k, "fp-a", time.Minute, dedup.Acquired)
	// Another payload while the first runs waits for it: never both at once.
	mustClaim(t, s, k, "fp-b", time.Minute, dedup.InProgress)
	if err := s.Complete(ctx, c.Hold, nil, 0); err != nil {
		t.Fatal(err)
	}
	m := mustClaim(t, s, k, "fp-b", time.Minute, dedup.Conflict)
	if m.Fingerprint != "fp-a" {
		t.Fatalf("mismatch reports fingerprint %q, want fp-a", m.Fingerprint)
	}
	mustClaim(t, s, k, "", time.Minute, dedup.Duplicate) // no fingerprint: no check
	if rec.Count(dedup.Conflict) != 1 {
		t.Fatalf("observer saw %d mismatches, want 1", rec.Count(dedup.Conflict))
	}
}

// A failed record never blocks a new incarnation of its key, corrected
// payload or not; neither does a lease that expired. The new fingerprint is
// stored, so the done record then guards the corrected payload.
func testOtherFingerprintTakesOverFailedOrExpired(t *testing.T, st suite) {
	ctx := context.Background()
	s := st.open(t, storage.Options{})
	rec := s.rec
	for _, tt := range []struct {
		name string
		end  func(t *testing.T, k dedup.Key, c storage.Claim)
	}{
		{"failed", func(t *testing.T, _ dedup.Key, c storage.Claim) {
			if err := s.Release(ctx, c.Hold, "declined"); err != nil {
				t.Fatal(err)
			}
		}},
		{"expired", func(t *testing.T, k dedup.Key, _ storage.Claim) { s.waitLeaseEnd(t, k) }},
	} {
		k := mustKey(t, "payment:charge", "takeover-"+tt.name)
		old := mustClaim(t, s, k, "fp-a", 30*time.Millisecond, dedup.Acquired)
		tt.end(t, k, old)
		c := mustClaim(t, s, k, "fp-b", time.Minute, dedup.Acquired)
		if c.Attempt != 2 || c.Hold.Token <= old.Hold.Token {
			t.Fatalf("%s: takeover %+v after %+v", tt.name, c, old)
		}
		if r, _ := s.Status(ctx, k); r.State != dedup.StatusRunning || r.Fingerprint != "fp-b" {
			t.Fatalf("%s: record after takeover: %+v, want running with fp-b", tt.name, r)
		}
		mustClaim(t, s, k, "fp-a", time.Minute, dedup.InProgress) // the live lease of fp-b
		if err := s.Complete(ctx, c.Hold, nil, 0); err != nil {
			t.Fatal(err)
		}
		mustClaim(t, s, k, "fp-b", time.Minute, dedup.Duplicate)
		mustClaim(t, s, k, "fp-a", time.Minute, dedup.Conflict)
	}
	if n := rec.Count(dedup.Conflict); n != 2 {
		t.Fatalf("observer saw %d mismatches, want 2 (one per done record)", n)
	}
}

// Re-entrant claims (issue 14): the same delivery takes its own running
// claim again at once with a fresh token; another delivery, or a claim
// without one, still sees it in progress.
func testReentrantClaimSameDeliveryOnly(t *testing.T, st suite) {
	ctx := context.Background()
	s := st.open(t, storage.Options{})
	k := mustKey(t, "payment:charge", "again")
	mine, other := "boot-a/task-1", "boot-b/task-1"

	first, err := s.Claim(ctx, k, "fp", time.Minute, mine)
	if err != nil || first.Outcome != dedup.Acquired || first.Hold.Owner != "boot-a/task-1" {
		t.Fatalf("first: %+v %v", first, err)
	}
	for name, d := range map[string]string{"other delivery": other, "no delivery": ""} {
		ip, err := s.Claim(ctx, k, "fp", time.Minute, d)
		if err != nil || ip.Outcome != dedup.InProgress || ip.Owner != "boot-a/task-1" {
			t.Fatalf("%s: %+v %v", name, ip, err)
		}
	}
	again, err := s.Claim(ctx, k, "fp", time.Minute, mine)
	if err != nil || again.Outcome != dedup.Acquired || again.Hold.Token <= first.Hold.Token || again.Attempt != 1 {
		t.Fatalf("same delivery again: %+v %v (first token %d)", again, err, first.Hold.Token)
	}
	if err := s.Complete(ctx, first.Hold, nil, 0); !errors.Is(err, storage.ErrLeaseLost) {
		t.Fatalf("the lost claim's hold must be fenced out: %v", err)
	}
	if c, err := s.Claim(ctx, k, "fp-other", time.Minute, mine); err != nil || c.Outcome != dedup.InProgress {
		t.Fatalf("re-entry with another fingerprint must wait for the live lease: %+v %v", c, err)
	}
	if err := s.Complete(ctx, again.Hold, []byte("done"), 0); err != nil {
		t.Fatal(err)
	}
	if c, _ := s.Claim(ctx, k, "fp", time.Minute, mine); c.Outcome != dedup.Duplicate {
		t.Fatalf("a done key never runs again, re-entrant or not: %v", c.Outcome)
	}
}

func testClaimRejectsSeparator(t *testing.T, st suite) {
	ctx := context.Background()
	s := st.open(t, storage.Options{})
	k := mustKey(t, "t", "sep")
	if _, err := s.Claim(ctx, k, "a|b", time.Minute, ""); err == nil || !strings.Contains(err.Error(), "'|'") {
		t.Fatalf("fingerprint with '|': %v", err)
	}
	if _, err := s.Claim(ctx, k, "", time.Minute, "x|y"); err == nil {
		t.Fatal("delivery with '|' accepted")
	}
	if _, err := st.newStore(t, storage.Options{Owner: "a|b"}); err == nil {
		t.Fatal("owner with '|' accepted")
	}
	if r, _ := s.Status(ctx, k); r.State != dedup.StatusUnknown {
		t.Fatalf("a refused claim wrote %+v", r)
	}
}
