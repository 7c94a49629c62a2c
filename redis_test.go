package onceq_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/internal/redistest"
)

type recorder struct {
	mu sync.Mutex
	ds []onceq.Event
}

func (r *recorder) observe(_ context.Context, d onceq.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ds = append(r.ds, d)
}

func (r *recorder) count(o string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, d := range r.ds {
		if d.Outcome == o {
			n++
		}
	}
	return n
}

func newStore(t *testing.T, rdb redis.UniversalClient, opts onceq.StoreOptions) (*onceq.RedisStore, *recorder) {
	t.Helper()
	rec := &recorder{}
	opts.Observer = rec.observe
	s, err := onceq.NewRedisStore(rdb, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s, rec
}

func mustKey(t *testing.T, ns, id string) onceq.Key {
	t.Helper()
	k, err := onceq.NewKey(ns, id)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func mustClaim(t *testing.T, s onceq.Store, k onceq.Key, fp string, lease time.Duration, want onceq.Decision) onceq.Claim {
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

func TestClaimLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, rec := newStore(t, redistest.Client(t), onceq.StoreOptions{})
	k := mustKey(t, "email:send", "welcome-1")

	c := mustClaim(t, s, k, "fp1", time.Minute, onceq.Acquired)
	if c.Attempt != 1 || c.Hold.Token <= 0 {
		t.Fatalf("first claim: attempt %d token %d", c.Attempt, c.Hold.Token)
	}
	ip := mustClaim(t, s, k, "fp1", time.Minute, onceq.InProgress)
	if !ip.LeaseUntil.After(time.Now().Add(30 * time.Second)) {
		t.Fatalf("in progress lease ends %v, want about a minute from now", ip.LeaseUntil)
	}
	if ip.Owner == "" {
		t.Fatal("in progress: no owner reported")
	}
	if err := s.Complete(ctx, c.Hold, []byte(`{"message_id":"m1"}`), 0); err != nil {
		t.Fatal(err)
	}
	dup := mustClaim(t, s, k, "fp1", time.Minute, onceq.Duplicate)
	if string(dup.Result) != `{"message_id":"m1"}` || dup.CompletedAt.IsZero() {
		t.Fatalf("duplicate: result %q completed %v", dup.Result, dup.CompletedAt)
	}
	r, err := s.Status(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if r.State != onceq.StatusDone || r.Attempts != 1 || r.Fingerprint != "fp1" || r.FirstSeen.IsZero() ||
		r.CompletedAt.Before(r.FirstSeen) || r.ExpiresIn <= 23*time.Hour {
		t.Fatalf("status after complete: %+v", r)
	}
	for o, want := range map[string]int{
		"claimed": 1, "in_progress": 1, "completed": 1, "duplicate": 1,
	} {
		if got := rec.count(o); got != want {
			t.Errorf("observer saw %d %s, want %d", got, o, want)
		}
	}
}

func TestReleaseAllowsNextClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := newStore(t, redistest.Client(t), onceq.StoreOptions{})
	k := mustKey(t, "payment:charge", "pmt-1")

	c1 := mustClaim(t, s, k, "fp", time.Minute, onceq.Acquired)
	if err := s.Release(ctx, c1.Hold, "gateway timeout"); err != nil {
		t.Fatal(err)
	}
	r, err := s.Status(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if r.State != onceq.StatusFailed || r.Error != "gateway timeout" || r.ExpiresIn > time.Hour {
		t.Fatalf("status after release: %+v", r)
	}
	c2 := mustClaim(t, s, k, "fp", time.Minute, onceq.Acquired)
	if c2.Attempt != 2 || c2.Hold.Token <= c1.Hold.Token {
		t.Fatalf("second claim: attempt %d token %d (first %d)", c2.Attempt, c2.Hold.Token, c1.Hold.Token)
	}
	// The old token is dead: releasing or completing with it changes nothing.
	if err := s.Release(ctx, c1.Hold, "late"); !errors.Is(err, onceq.ErrLeaseLost) {
		t.Fatalf("stale release: %v, want ErrLeaseLost", err)
	}
	if err := s.Complete(ctx, c2.Hold, nil, 0); err != nil {
		t.Fatal(err)
	}
	if r, _ := s.Status(ctx, k); r.State != onceq.StatusDone || r.Attempts != 2 || r.Error != "" {
		t.Fatalf("status after second run: %+v", r)
	}
}

func TestConcurrentClaimsOneWinner(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Client(t)
	s, _ := newStore(t, rdb, onceq.StoreOptions{})
	k := mustKey(t, "scan:file", "doc-1")

	const n = 64
	var wg sync.WaitGroup
	outcomes := make([]onceq.Decision, n)
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
		case onceq.Acquired:
			acquired++
		case onceq.InProgress:
		default:
			t.Fatalf("claim %d: %v", i, outcomes[i])
		}
	}
	if acquired != 1 {
		t.Fatalf("%d of %d concurrent claims acquired, want exactly 1", acquired, n)
	}
}

func TestMismatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, rec := newStore(t, redistest.Client(t), onceq.StoreOptions{})
	k := mustKey(t, "payment:charge", "pmt-2")

	c := mustClaim(t, s, k, "fp-a", time.Minute, onceq.Acquired)
	// Another payload while the first runs waits for it: never both at once.
	mustClaim(t, s, k, "fp-b", time.Minute, onceq.InProgress)
	if err := s.Complete(ctx, c.Hold, nil, 0); err != nil {
		t.Fatal(err)
	}
	m := mustClaim(t, s, k, "fp-b", time.Minute, onceq.Conflict)
	if m.Fingerprint != "fp-a" {
		t.Fatalf("mismatch reports fingerprint %q, want fp-a", m.Fingerprint)
	}
	mustClaim(t, s, k, "", time.Minute, onceq.Duplicate) // no fingerprint: no check
	if rec.count("mismatch") != 1 {
		t.Fatalf("observer saw %d mismatches, want 1", rec.count("mismatch"))
	}
}

// A failed record never blocks a new incarnation of its key, corrected
// payload or not; neither does a lease that expired. The new fingerprint is
// stored, so the done record then guards the corrected payload.
func TestOtherFingerprintTakesOverFailedOrExpired(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, rec := newStore(t, redistest.Client(t), onceq.StoreOptions{})
	for _, tt := range []struct {
		name string
		end  func(t *testing.T, c onceq.Claim)
	}{
		{"failed", func(t *testing.T, c onceq.Claim) {
			if err := s.Release(ctx, c.Hold, "declined"); err != nil {
				t.Fatal(err)
			}
		}},
		{"expired", func(t *testing.T, c onceq.Claim) { waitLeaseEnd(t, c.LeaseUntil) }},
	} {
		k := mustKey(t, "payment:charge", "takeover-"+tt.name)
		old := mustClaim(t, s, k, "fp-a", 30*time.Millisecond, onceq.Acquired)
		tt.end(t, old)
		c := mustClaim(t, s, k, "fp-b", time.Minute, onceq.Acquired)
		if c.Attempt != 2 || c.Hold.Token <= old.Hold.Token {
			t.Fatalf("%s: takeover %+v after %+v", tt.name, c, old)
		}
		if r, _ := s.Status(ctx, k); r.State != onceq.StatusRunning || r.Fingerprint != "fp-b" {
			t.Fatalf("%s: record after takeover: %+v, want running with fp-b", tt.name, r)
		}
		mustClaim(t, s, k, "fp-a", time.Minute, onceq.InProgress) // the live lease of fp-b
		if err := s.Complete(ctx, c.Hold, nil, 0); err != nil {
			t.Fatal(err)
		}
		mustClaim(t, s, k, "fp-b", time.Minute, onceq.Duplicate)
		mustClaim(t, s, k, "fp-a", time.Minute, onceq.Conflict)
	}
	if n := rec.count("mismatch"); n != 2 {
		t.Fatalf("observer saw %d mismatches, want 2 (one per done record)", n)
	}
}

// A worker whose lease expired is fenced out: the next claim gets a larger
// token, and the stale holder can neither extend, complete nor release.
func TestStaleWorkerFencedOut(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, rec := newStore(t, redistest.Client(t), onceq.StoreOptions{})
	k := mustKey(t, "payment:charge", "pmt-3")

	stale := mustClaim(t, s, k, "fp", 30*time.Millisecond, onceq.Acquired)
	waitLeaseEnd(t, stale.LeaseUntil)
	fresh := mustClaim(t, s, k, "fp", time.Minute, onceq.Acquired)
	if fresh.Hold.Token <= stale.Hold.Token || fresh.Attempt != 2 {
		t.Fatalf("takeover: token %d after %d, attempt %d", fresh.Hold.Token, stale.Hold.Token, fresh.Attempt)
	}
	if errs := s.Extend(ctx, time.Minute, stale.Hold); !errors.Is(errs[0], onceq.ErrLeaseLost) {
		t.Fatalf("stale extend: %v", errs[0])
	}
	if err := s.Complete(ctx, stale.Hold, []byte("stale"), 0); !errors.Is(err, onceq.ErrLeaseLost) {
		t.Fatalf("stale complete: %v, want ErrLeaseLost", err)
	}
	if err := s.Complete(ctx, fresh.Hold, []byte("fresh"), 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, stale.Hold, "stale"); !errors.Is(err, onceq.ErrLeaseLost) {
		t.Fatalf("stale release after completion: %v", err)
	}
	r, _ := s.Status(ctx, k)
	if r.State != onceq.StatusDone || string(r.Result) != "fresh" {
		t.Fatalf("newer holder's result must stand: %+v", r)
	}
	if rec.count("lease_lost") != 3 {
		t.Fatalf("observer saw %d lease_lost, want 3", rec.count("lease_lost"))
	}
}

// Tokens keep growing after a record expired entirely, so a holder from a
// forgotten record can never match a new one.
func TestTokenGrowsAcrossExpiry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := newStore(t, redistest.Client(t), onceq.StoreOptions{FailedTTL: time.Millisecond})
	k := mustKey(t, "email:send", "e-expire")
	old := mustClaim(t, s, k, "fp", 5*time.Millisecond, onceq.Acquired)
	if err := s.Forget(ctx, k); err != nil {
		t.Fatal(err)
	}
	c := mustClaim(t, s, k, "fp", time.Minute, onceq.Acquired)
	if c.Hold.Token <= old.Hold.Token || c.Attempt != 1 {
		t.Fatalf("new record: token %d (old %d), attempt %d", c.Hold.Token, old.Hold.Token, c.Attempt)
	}
	if err := s.Complete(ctx, old.Hold, nil, 0); !errors.Is(err, onceq.ErrLeaseLost) {
		t.Fatalf("complete with a token from a forgotten record: %v", err)
	}
}

func TestExtendKeepsLeaseAlive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := newStore(t, redistest.Client(t), onceq.StoreOptions{})
	k1, k2 := mustKey(t, "scan:file", "x1"), mustKey(t, "scan:file", "x2")
	c1 := mustClaim(t, s, k1, "", 40*time.Millisecond, onceq.Acquired)
	c2 := mustClaim(t, s, k2, "", 40*time.Millisecond, onceq.Acquired)
	gone := onceq.Hold{Key: mustKey(t, "scan:file", "never-claimed"), Token: 7}

	errs := s.Extend(ctx, time.Minute, c1.Hold, c2.Hold, gone)
	if errs[0] != nil || errs[1] != nil || !errors.Is(errs[2], onceq.ErrLeaseLost) {
		t.Fatalf("extend: %v", errs)
	}
	waitLeaseEnd(t, c1.LeaseUntil)
	ip := mustClaim(t, s, k1, "", time.Minute, onceq.InProgress)
	if time.Until(ip.LeaseUntil) < 50*time.Second {
		t.Fatalf("extended lease ends in %v, want about a minute", time.Until(ip.LeaseUntil))
	}
	mustClaim(t, s, k2, "", time.Minute, onceq.InProgress)
}

func TestTTLs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Client(t)
	s, _ := newStore(t, rdb, onceq.StoreOptions{DoneTTL: 50 * time.Millisecond, FailedTTL: 50 * time.Millisecond})
	done, failed, running := mustKey(t, "t", "done"), mustKey(t, "t", "failed"), mustKey(t, "t", "running")

	c := mustClaim(t, s, done, "", time.Minute, onceq.Acquired)
	if err := s.Complete(ctx, c.Hold, []byte("r"), 0); err != nil {
		t.Fatal(err)
	}
	c = mustClaim(t, s, failed, "", time.Minute, onceq.Acquired)
	if err := s.Release(ctx, c.Hold, "boom"); err != nil {
		t.Fatal(err)
	}
	mustClaim(t, s, running, "", 20*time.Millisecond, onceq.Acquired)
	if _, err := s.Reserve(ctx, mustKey(t, "t", "window"), 50*time.Millisecond, "h"); err != nil {
		t.Fatal(err)
	}
	// Every key the engine wrote carries a TTL.
	keys, err := rdb.Keys(ctx, "*").Result()
	if err != nil || len(keys) != 4 {
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
	mustClaim(t, s, done, "", time.Minute, onceq.Acquired)
}

func TestReserveWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, rec := newStore(t, redistest.Client(t), onceq.StoreOptions{})
	k := mustKey(t, "file_scan", "file-123")

	r, err := s.Reserve(ctx, k, 80*time.Millisecond, "task-a")
	if err != nil || !r.Reserved {
		t.Fatalf("first reserve: %+v %v", r, err)
	}
	r, err = s.Reserve(ctx, k, 80*time.Millisecond, "task-b")
	if err != nil || r.Reserved || r.Holder != "task-a" || r.RetryAfter <= 0 || r.RetryAfter > 80*time.Millisecond {
		t.Fatalf("second reserve: %+v %v", r, err)
	}
	if r, _ := s.Reserve(ctx, k, 80*time.Millisecond, "task-a"); r.Reserved || r.Holder != "task-a" {
		t.Fatalf("the holder again: %+v", r)
	}
	if err := s.Unreserve(ctx, k, "task-b"); err != nil { // not the holder: no effect
		t.Fatal(err)
	}
	if r, _ := s.Reserve(ctx, k, 80*time.Millisecond, "task-c"); r.Reserved {
		t.Fatal("unreserve by a non-holder freed the window")
	}
	time.Sleep(r.RetryAfter + 20*time.Millisecond)
	if r, _ := s.Reserve(ctx, k, time.Minute, "task-d"); !r.Reserved {
		t.Fatalf("window did not expire: %+v", r)
	}
	if err := s.Unreserve(ctx, k, "task-d"); err != nil {
		t.Fatal(err)
	}
	if r, _ := s.Reserve(ctx, k, time.Minute, "task-e"); !r.Reserved {
		t.Fatal("unreserve by the holder did not free the window")
	}
	// The holder asking again is not throttled by its own window.
	if rec.count("throttled") != 2 || rec.count("reserved") != 4 {
		t.Fatalf("observer: %d throttled, %d reserved", rec.count("throttled"), rec.count("reserved"))
	}
}

func TestResultTooLarge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := newStore(t, redistest.Client(t), onceq.StoreOptions{MaxResultBytes: 8})
	k := mustKey(t, "t", "big")
	c := mustClaim(t, s, k, "", time.Minute, onceq.Acquired)
	if err := s.Complete(ctx, c.Hold, []byte("123456789"), 0); !errors.Is(err, onceq.ErrResultTooLarge) {
		t.Fatalf("complete: %v, want ErrResultTooLarge", err)
	}
	if r, _ := s.Status(ctx, k); r.State != onceq.StatusRunning {
		t.Fatalf("an oversize result must leave the claim held: %+v", r)
	}
	if err := s.Complete(ctx, c.Hold, []byte("12345678"), 0); err != nil {
		t.Fatal(err)
	}
}

func TestStatusAbsentAndForget(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := newStore(t, redistest.Client(t), onceq.StoreOptions{})
	k := mustKey(t, "t", "absent")
	if r, err := s.Status(ctx, k); err != nil || r.State != onceq.StatusUnknown {
		t.Fatalf("status of nothing: %+v %v", r, err)
	}
	c := mustClaim(t, s, k, "", time.Minute, onceq.Acquired)
	if err := s.Complete(ctx, c.Hold, nil, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Forget(ctx, k); err != nil {
		t.Fatal(err)
	}
	mustClaim(t, s, k, "", time.Minute, onceq.Acquired)
}

// With Redis gone, every call is an error: never a panic, never a false Acquired.
func TestRedisDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: 1, DialTimeout: 200 * time.Millisecond, DialerRetries: 1})
	t.Cleanup(func() { rdb.Close() })
	s, rec := newStore(t, rdb, onceq.StoreOptions{})
	k := mustKey(t, "t", "down")
	c := mustClaim(t, s, k, "", time.Minute, onceq.Acquired)
	srv.Stop()

	if c2, err := s.Claim(ctx, k, "", time.Minute, ""); err == nil || c2.Outcome == onceq.Acquired {
		t.Fatalf("claim with Redis down: %+v %v", c2, err)
	}
	if err := s.Complete(ctx, c.Hold, nil, 0); err == nil || errors.Is(err, onceq.ErrLeaseLost) {
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
	if rec.count("error") < 4 {
		t.Fatalf("observer saw %d errors", rec.count("error"))
	}
	rdb.Close() // stop the pool redialling a dead server for the rest of the run
}

func waitLeaseEnd(t *testing.T, until time.Time) {
	t.Helper()
	time.Sleep(time.Until(until) + 5*time.Millisecond)
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
