package oncetest

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/storage"
)

// Complete's doneTTL keeps one done record for its own TTL; without it the
// store's DoneTTL applies.
func testCompleteDoneTTL(t *testing.T, st suite) {
	ctx := context.Background()
	s := st.open(t, storage.Options{DoneTTL: 24 * time.Hour})
	for _, tt := range []struct {
		id       string
		ttl      time.Duration
		min, max time.Duration
	}{
		{"default", 0, 23 * time.Hour, 24 * time.Hour},
		{"zero", 0, 23 * time.Hour, 24 * time.Hour},
		{"short", 30 * time.Second, time.Second, 30 * time.Second},
		{"long", 72 * time.Hour, 71 * time.Hour, 72 * time.Hour},
	} {
		k := mustKey(t, "scan:file", "ttl-"+tt.id)
		c := mustClaim(t, s, k, "fp", time.Minute, dedup.Acquired)
		if err := s.Complete(ctx, c.Hold, []byte("clean"), tt.ttl); err != nil {
			t.Fatal(err)
		}
		if r, err := s.Status(ctx, k); err != nil || r.State != dedup.StatusDone || r.ExpiresIn < tt.min || r.ExpiresIn > tt.max {
			t.Errorf("%s: %+v %v; want done expiring in %v..%v", tt.id, r, err, tt.min, tt.max)
		}
	}
	k := mustKey(t, "scan:file", "ttl-bad")
	c := mustClaim(t, s, k, "fp", time.Minute, dedup.Acquired)
	if err := s.Complete(ctx, c.Hold, nil, -time.Second); err == nil {
		t.Fatal("a negative done TTL was accepted")
	}
}

func testResultTooLarge(t *testing.T, st suite) {
	ctx := context.Background()
	s := st.open(t, storage.Options{MaxResultBytes: 8})
	k := mustKey(t, "t", "big")
	c := mustClaim(t, s, k, "", time.Minute, dedup.Acquired)
	if err := s.Complete(ctx, c.Hold, []byte("123456789"), 0); !errors.Is(err, storage.ErrResultTooLarge) {
		t.Fatalf("complete: %v, want ErrResultTooLarge", err)
	}
	if r, _ := s.Status(ctx, k); r.State != dedup.StatusRunning {
		t.Fatalf("an oversize result must leave the claim held: %+v", r)
	}
	if err := s.Complete(ctx, c.Hold, []byte("12345678"), 0); err != nil {
		t.Fatal(err)
	}
}

func testStatusAbsentAndForget(t *testing.T, st suite) {
	ctx := context.Background()
	s := st.open(t, storage.Options{})
	k := mustKey(t, "t", "absent")
	if r, err := s.Status(ctx, k); err != nil || r.State != dedup.StatusUnknown {
		t.Fatalf("status of nothing: %+v %v", r, err)
	}
	c := mustClaim(t, s, k, "", time.Minute, dedup.Acquired)
	if err := s.Complete(ctx, c.Hold, nil, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Forget(ctx, k); err != nil {
		t.Fatal(err)
	}
	mustClaim(t, s, k, "", time.Minute, dedup.Acquired)
}

// Every entry expires: a done record after its done TTL, a failed one
// after the failed TTL, a running one its grace after its lease, and a
// window after itself. Then the key is as if it had never been seen.
func testExpiry(t *testing.T, st suite) {
	ctx := context.Background()
	s := st.open(t, storage.Options{DoneTTL: 50 * time.Millisecond, FailedTTL: 50 * time.Millisecond})
	done, failed, running := mustKey(t, "t", "done"), mustKey(t, "t", "failed"), mustKey(t, "t", "running")
	win := mustKey(t, "t", "window")

	c := mustClaim(t, s, done, "fp", time.Minute, dedup.Acquired)
	if err := s.Complete(ctx, c.Hold, []byte("r"), 0); err != nil {
		t.Fatal(err)
	}
	c = mustClaim(t, s, failed, "", time.Minute, dedup.Acquired)
	if err := s.Release(ctx, c.Hold, "boom"); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Reserve(ctx, win, 50*time.Millisecond, "h"); err != nil || !r.Reserved {
		t.Fatalf("reserve: %+v %v", r, err)
	}
	// Written after the window and living longer (lease + grace): once it
	// is gone, so is the window.
	mustClaim(t, s, running, "", 20*time.Millisecond, dedup.Acquired)
	for _, k := range []dedup.Key{done, failed, running} {
		s.waitGone(t, k)
	}
	if r, err := s.Reserve(ctx, win, time.Minute, "other"); err != nil || !r.Reserved {
		t.Fatalf("window after it ended: %+v %v", r, err)
	}
	if c := mustClaim(t, s, done, "another payload", time.Minute, dedup.Acquired); c.Attempt != 1 {
		t.Fatalf("an expired done record still counts: attempt %d", c.Attempt)
	}
}

// The defaults StoreOptions documents: a done record kept 24h, a failed
// one 1h, a running one its lease plus 1h, results up to 64 KiB.
func testDefaults(t *testing.T, st suite) {
	ctx := context.Background()
	s := st.open(t, storage.Options{})
	within := func(what string, got, lo, hi time.Duration) {
		t.Helper()
		if got <= lo || got > hi {
			t.Errorf("%s expires in %v, want %v..%v", what, got, lo, hi)
		}
	}
	k := mustKey(t, "t", "defaults")
	c := mustClaim(t, s, k, "", time.Minute, dedup.Acquired)
	r, _ := s.Status(ctx, k)
	within("a running record", r.ExpiresIn, time.Hour, time.Hour+time.Minute)
	if err := s.Complete(ctx, c.Hold, bytes.Repeat([]byte("x"), 64<<10+1), 0); !errors.Is(err, storage.ErrResultTooLarge) {
		t.Fatalf("a result over 64 KiB: %v, want ErrResultTooLarge", err)
	}
	if err := s.Complete(ctx, c.Hold, bytes.Repeat([]byte("x"), 64<<10), 0); err != nil {
		t.Fatalf("a result of 64 KiB: %v", err)
	}
	r, _ = s.Status(ctx, k)
	within("a done record", r.ExpiresIn, 23*time.Hour, 24*time.Hour)
	if len(r.Result) != 64<<10 {
		t.Fatalf("stored %d result bytes, want %d", len(r.Result), 64<<10)
	}
	f := mustKey(t, "t", "defaults-failed")
	c = mustClaim(t, s, f, "", time.Minute, dedup.Acquired)
	if err := s.Release(ctx, c.Hold, "boom"); err != nil {
		t.Fatal(err)
	}
	r, _ = s.Status(ctx, f)
	within("a failed record", r.ExpiresIn, time.Hour-time.Minute, time.Hour)
	if r.Owner == "" || r.Token != c.Hold.Token {
		t.Fatalf("a claim without delivery is made as the store's Owner: %+v", r)
	}
}

// Options, leases, windows and TTLs the contract refuses: the constructor
// or the call fails and nothing is written.
func testLimits(t *testing.T, st suite) {
	ctx := context.Background()
	for name, opts := range map[string]storage.Options{
		"DoneTTL below 1ms":       {DoneTTL: 500 * time.Microsecond},
		"negative FailedTTL":      {FailedTTL: -time.Second},
		"negative MaxResultBytes": {MaxResultBytes: -1},
		"Owner with '|'":          {Owner: "host|1"},
	} {
		if _, err := st.newStore(t, opts); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	s := st.open(t, storage.Options{Owner: "test-owner"})
	k := mustKey(t, "t", "limits")
	if _, err := s.Claim(ctx, k, "", 500*time.Microsecond, ""); err == nil {
		t.Error("a lease below 1ms was accepted")
	}
	if _, err := s.Reserve(ctx, k, 0, "h"); err == nil {
		t.Error("a window below 1ms was accepted")
	}
	if r, _ := s.Status(ctx, k); r.State != dedup.StatusUnknown {
		t.Fatalf("a refused claim wrote %+v", r)
	}
	if r, err := s.Reserve(ctx, k, time.Minute, "h"); err != nil || !r.Reserved {
		t.Fatalf("a refused reservation held the window: %+v %v", r, err)
	}
	c := mustClaim(t, s, k, "", time.Minute, dedup.Acquired)
	if c.Hold.Owner != "test-owner" {
		t.Fatalf("claim without delivery owned by %q, want the store's Owner", c.Hold.Owner)
	}
	if err := s.Complete(ctx, c.Hold, nil, 500*time.Microsecond); err == nil {
		t.Fatal("a done TTL below 1ms was accepted")
	}
	if r, _ := s.Status(ctx, k); r.State != dedup.StatusRunning {
		t.Fatalf("a refused completion wrote %+v", r)
	}
}
