package dedup_test

import (
	"context"
	"errors"
	"testing"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/dedup/storage"
)

func TestIncarnation(t *testing.T) {
	t.Parallel()
	task := func(v string) *asynq.Task {
		return asynq.NewTaskWithHeaders("payment:charge", nil, map[string]string{dedup.HeaderIncarnation: v})
	}
	if n, err := dedup.Incarnation(nil); n != 1 || err != nil {
		t.Fatalf("no header: %d %v, want 1", n, err)
	}
	for v, want := range map[string]int{"1": 1, "2": 2, "17": 17, "999999999": 999999999} {
		if n, err := dedup.Incarnation(task(v).Headers()); n != want || err != nil {
			t.Errorf("%q: %d %v, want %d", v, n, err, want)
		}
	}
	for _, v := range []string{"", "0", "-1", "+2", "02", " 2", "2 ", "2.0", "1e3", "two", "1000000000", "99999999999999999999"} {
		if n, err := dedup.Incarnation(task(v).Headers()); !errors.Is(err, dedup.ErrBadIncarnation) {
			t.Errorf("%q: %d %v, want ErrBadIncarnation", v, n, err)
		}
	}
}

func TestKeyDownstream(t *testing.T) {
	t.Parallel()
	k := dedup.Key{Namespace: "payment:charge", ID: "pmt-1"}
	for n, want := range map[int]string{0: "payment:charge/pmt-1", 1: "payment:charge/pmt-1", 2: "payment:charge/pmt-1#2", 10: "payment:charge/pmt-1#10"} {
		if got := dedup.Downstream(k, n); got != want {
			t.Errorf("Downstream(%d) = %q, want %q", n, got, want)
		}
	}
	// An id that looks like another key's later incarnation keeps its own
	// downstream key.
	seen := map[string]string{}
	for _, c := range []struct {
		id string
		n  int
	}{{"pmt-1", 1}, {"pmt-1", 2}, {"pmt-1#2", 1}, {"pmt-1#2", 2}, {"pmt-1#2#1", 1}, {"pmt-1#1", 1}, {"pmt-1", 12}, {"pmt-1#1", 2}} {
		d := dedup.Downstream(dedup.Key{Namespace: "payment:charge", ID: c.id}, c.n)
		if other, dup := seen[d]; dup {
			t.Errorf("%s incarnation %d and %s share the downstream key %q", c.id, c.n, other, d)
		}
		seen[d] = c.id
	}
}

// The handler sees the task's incarnation and the downstream key built from
// it; a garbled header is a bad payload that never runs the handler.
func TestMiddlewareIncarnation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := newStore(t, redistest.Client(t), storage.Options{})
	rec := &oncetest.Recorder{}
	m := newMiddleware(t, s, dedup.MiddlewareOptions{Observer: rec.Observe})
	type seen struct {
		down string
		n    int
	}
	got := make(chan seen, 1)
	h := m.Wrap(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		d, _ := dedup.DownstreamKey(ctx)
		n, _ := dedup.IncarnationFromContext(ctx)
		got <- seen{d, n}
		return nil
	}))
	for i, tt := range []struct {
		inc  string
		want seen
	}{
		{"", seen{"payment:charge/inc-0", 1}},
		{"1", seen{"payment:charge/inc-1", 1}},
		{"2", seen{"payment:charge/inc-2#2", 2}},
	} {
		hdr := map[string]string{dedup.HeaderKey: "payment:charge/inc-" + string(rune('0'+i))}
		if tt.inc != "" {
			hdr[dedup.HeaderIncarnation] = tt.inc
		}
		if err := h.ProcessTask(ctx, asynq.NewTaskWithHeaders("payment:charge", nil, hdr)); err != nil {
			t.Fatal(err)
		}
		if s := <-got; s != tt.want {
			t.Errorf("incarnation %q: handler saw %+v, want %+v", tt.inc, s, tt.want)
		}
	}
	bad := asynq.NewTaskWithHeaders("payment:charge", nil, map[string]string{
		dedup.HeaderKey: "payment:charge/inc-bad", dedup.HeaderIncarnation: "2x"})
	if err := h.ProcessTask(ctx, bad); !errors.Is(err, dedup.ErrBadIncarnation) || !errors.Is(err, asynq.SkipRetry) {
		t.Fatalf("garbled incarnation: %v, want ErrBadIncarnation and SkipRetry", err)
	}
	if len(got) != 0 || rec.Count("bad_payload") != 1 {
		t.Fatalf("garbled incarnation ran the handler or was not reported as a bad payload")
	}
	if _, ok := dedup.DownstreamKey(ctx); ok {
		t.Fatal("a context without a key has a downstream key")
	}
}

// Issue 19 end to end at the middleware: the first incarnation fails for
// good, the second carries a corrected payload (another fingerprint) and runs
// under a new downstream key; the old payload is then a mismatch.
func TestMiddlewareNewIncarnationAfterFailure(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := newStore(t, redistest.Client(t), storage.Options{})
	m := newMiddleware(t, s, dedup.MiddlewareOptions{})
	var keys []string
	fail := errors.New("declined")
	h := m.Wrap(asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		d, _ := dedup.DownstreamKey(ctx)
		keys = append(keys, d)
		if string(t.Payload()) == "bad" {
			return fail
		}
		return nil
	}))
	task := func(payload, fp, inc string) *asynq.Task {
		hdr := map[string]string{dedup.HeaderKey: "payment:charge/pmt-19", dedup.HeaderFingerprint: fp}
		if inc != "" {
			hdr[dedup.HeaderIncarnation] = inc
		}
		return asynq.NewTaskWithHeaders("payment:charge", []byte(payload), hdr)
	}
	for range 2 { // a retry of the first incarnation keeps its downstream key
		if err := h.ProcessTask(ctx, task("bad", "fp-bad", "")); !errors.Is(err, fail) {
			t.Fatalf("first incarnation: %v", err)
		}
	}
	if err := h.ProcessTask(ctx, task("good", "fp-good", "2")); err != nil {
		t.Fatalf("second incarnation with a corrected payload: %v", err)
	}
	want := []string{"payment:charge/pmt-19", "payment:charge/pmt-19", "payment:charge/pmt-19#2"}
	if len(keys) != 3 || keys[0] != want[0] || keys[1] != want[1] || keys[2] != want[2] {
		t.Fatalf("downstream keys %q, want %q", keys, want)
	}
	if err := h.ProcessTask(ctx, task("bad", "fp-bad", "")); !errors.Is(err, dedup.ErrMismatch) {
		t.Fatalf("the old payload after the done incarnation: %v, want a mismatch", err)
	}
}
