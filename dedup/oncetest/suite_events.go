package oncetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/storage"
)

// Every decision is one event, in the order made, with the words logs and
// metrics carry; a hold's token where there is one.
func testEvents(t *testing.T, st suite) {
	ctx := context.Background()
	s := st.open(t, storage.Options{})
	k, w := mustKey(t, "email:send", "events"), mustKey(t, "email:send", "events-window")

	first := mustClaim(t, s, k, "fp", time.Minute, dedup.Acquired)
	mustClaim(t, s, k, "fp", time.Minute, dedup.InProgress)
	if err := s.Release(ctx, first.Hold, "smtp 451"); err != nil {
		t.Fatal(err)
	}
	c := mustClaim(t, s, k, "fp", time.Minute, dedup.Acquired)
	s.Extend(ctx, time.Minute, c.Hold, first.Hold)
	if err := s.Complete(ctx, c.Hold, []byte("sent"), 0); err != nil {
		t.Fatal(err)
	}
	_ = s.Complete(ctx, first.Hold, nil, 0)
	_ = s.Release(ctx, c.Hold, "late")
	mustClaim(t, s, k, "fp", time.Minute, dedup.Duplicate)
	mustClaim(t, s, k, "other", time.Minute, dedup.Conflict)
	for _, holder := range []string{"a", "b", "a"} {
		if _, err := s.Reserve(ctx, w, time.Minute, holder); err != nil {
			t.Fatal(err)
		}
	}
	// Status, Forget and Unreserve decide nothing.
	_, _ = s.Status(ctx, k)
	_ = s.Unreserve(ctx, w, "a")
	_ = s.Forget(ctx, k)

	// why: the event says why the job was stopped or delayed.
	type ev struct {
		op      string
		outcome dedup.Decision
		key     dedup.Key
		token   int64
		why     bool
	}
	want := []ev{
		{"claim", dedup.Acquired, k, first.Hold.Token, false},
		{"claim", "in_progress", k, 0, true},
		{"release", "released", k, first.Hold.Token, true}, // the cause: "smtp 451"
		{"claim", dedup.Acquired, k, c.Hold.Token, false},
		{"extend", "extended", k, c.Hold.Token, false},
		{"extend", "lease_lost", k, first.Hold.Token, true},
		{"complete", "completed", k, c.Hold.Token, false},
		{"complete", "lease_lost", k, first.Hold.Token, true},
		{"release", "lease_lost", k, c.Hold.Token, true},
		{"claim", "duplicate", k, 0, true},
		{"claim", dedup.Conflict, k, 0, true},
		{"reserve", "reserved", w, 0, false},
		{"reserve", "throttled", w, 0, true},
		{"reserve", "reserved", w, 0, true}, // the holder again
	}
	got := s.rec.Events()
	if len(got) != len(want) {
		t.Fatalf("%d events, want %d: %+v", len(got), len(want), got)
	}
	for i, e := range got {
		if g := (ev{e.Op, e.Outcome, e.Key, e.Token, e.Reason != ""}); g != want[i] {
			t.Errorf("event %d: %+v, want %+v (reason %q)", i, g, want[i], e.Reason)
		}
	}
	if r := got[2].Reason; r != "smtp 451" {
		t.Errorf("the release's reason %q, want its cause", r)
	}
}

// A context that is already done stops every call: an error wrapping its
// cause, never a decision; the calls that decide report it as an error
// event.
func testCancelledContext(t *testing.T, st suite) {
	s := st.open(t, storage.Options{})
	k := mustKey(t, "t", "cancelled")
	c := mustClaim(t, s, k, "", time.Minute, dedup.Acquired)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()

	if got, err := s.Claim(ctx, mustKey(t, "t", "other"), "", time.Minute, ""); !errors.Is(err, context.Canceled) || got.Outcome != "" {
		t.Errorf("claim: %+v %v", got, err)
	}
	if errs := s.Extend(ctx, time.Minute, c.Hold); !errors.Is(errs[0], context.Canceled) {
		t.Errorf("extend: %v", errs[0])
	}
	if err := s.Complete(ctx, c.Hold, nil, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("complete: %v", err)
	}
	if err := s.Release(ctx, c.Hold, "x"); !errors.Is(err, context.Canceled) {
		t.Errorf("release: %v", err)
	}
	if _, err := s.Reserve(ctx, k, time.Minute, "h"); !errors.Is(err, context.Canceled) {
		t.Errorf("reserve: %v", err)
	}
	if _, err := s.Status(ctx, k); !errors.Is(err, context.Canceled) {
		t.Errorf("status: %v", err)
	}
	if err := s.Forget(ctx, k); !errors.Is(err, context.Canceled) {
		t.Errorf("forget: %v", err)
	}
	if err := s.Unreserve(ctx, k, "h"); !errors.Is(err, context.Canceled) {
		t.Errorf("unreserve: %v", err)
	}
	if n := s.rec.Count("error"); n != 5 {
		t.Errorf("%d error events, want 5 (claim, extend, complete, release, reserve)", n)
	}
	if r, _ := s.Status(context.Background(), k); r.State != dedup.StatusRunning || r.Token != c.Hold.Token {
		t.Fatalf("cancelled calls changed the record: %+v", r)
	}
}
