package oncetest

import (
	"context"
	"testing"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/storage"
)

func testReserveWindow(t *testing.T, st suite) {
	ctx := context.Background()
	s := st.open(t, storage.Options{})
	rec := s.rec
	k := mustKey(t, "file_scan", "file-123")

	r, err := s.Reserve(ctx, k, 80*time.Millisecond, "task-a")
	if err != nil || !r.Reserved {
		t.Fatalf("first reserve: %+v %v", r, err)
	}
	// A lease as long as the window, taken after it: once it has ended,
	// so has the window.
	clock := mustKey(t, "t", "window-clock")
	mustClaim(t, s, clock, "", 80*time.Millisecond, dedup.Acquired)
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
	s.waitLeaseEnd(t, clock)
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
	if rec.Count("throttled") != 2 || rec.Count("reserved") != 4 {
		t.Fatalf("observer: %d throttled, %d reserved", rec.Count("throttled"), rec.Count("reserved"))
	}
}

// Forget frees the key's window along with its record.
func testForgetFreesWindow(t *testing.T, st suite) {
	ctx := context.Background()
	s := st.open(t, storage.Options{})
	k := mustKey(t, "file_scan", "forget-me")
	if r, err := s.Reserve(ctx, k, time.Minute, "task-a"); err != nil || !r.Reserved {
		t.Fatalf("reserve: %+v %v", r, err)
	}
	mustClaim(t, s, k, "", time.Minute, dedup.Acquired)
	if err := s.Forget(ctx, k); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Reserve(ctx, k, time.Minute, "task-b"); err != nil || !r.Reserved {
		t.Fatalf("window after Forget: %+v %v", r, err)
	}
	mustClaim(t, s, k, "", time.Minute, dedup.Acquired)
}
