package onceq_test

import (
	"context"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/internal/redistest"
)

// Complete's doneTTL keeps one done record for its own TTL; without it the
// store's DoneTTL applies.
func TestCompleteDoneTTL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := newStore(t, redistest.Client(t), onceq.StoreOptions{DoneTTL: 24 * time.Hour})
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
		c := mustClaim(t, s, k, "fp", time.Minute, onceq.Acquired)
		if err := s.Complete(ctx, c.Hold, []byte("clean"), tt.ttl); err != nil {
			t.Fatal(err)
		}
		if r, err := s.Status(ctx, k); err != nil || r.State != onceq.StatusDone || r.ExpiresIn < tt.min || r.ExpiresIn > tt.max {
			t.Errorf("%s: %+v %v; want done expiring in %v..%v", tt.id, r, err, tt.min, tt.max)
		}
	}
	k := mustKey(t, "scan:file", "ttl-bad")
	c := mustClaim(t, s, k, "fp", time.Minute, onceq.Acquired)
	if err := s.Complete(ctx, c.Hold, nil, -time.Second); err == nil {
		t.Fatal("a negative done TTL was accepted")
	}
}

// The middleware completes each type with its TypeOptions.DoneTTL.
func TestMiddlewarePerTypeDoneTTL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := newStore(t, redistest.Client(t), onceq.StoreOptions{})
	m := newMiddleware(t, s, onceq.WithTypes(onceq.MiddlewareOptions{}, map[string]onceq.TypeOptions{
		"scan:file": {DoneTTL: 30 * time.Second},
	}))
	var e effect
	h := m.Wrap(e.handler("clean"))
	for typ, want := range map[string]time.Duration{"scan:file": 30 * time.Second, "email:send": 24 * time.Hour} {
		k := mustKey(t, typ, "f-1")
		task := asynq.NewTaskWithHeaders(typ, []byte(`{}`), map[string]string{onceq.HeaderKey: k.String()})
		if err := h.ProcessTask(ctx, task); err != nil {
			t.Fatal(err)
		}
		if r, _ := s.Status(ctx, k); r.State != onceq.StatusDone || r.ExpiresIn > want || r.ExpiresIn < want-time.Minute/2 {
			t.Errorf("%s: %+v; want done expiring within %v", typ, r, want)
		}
	}
	if _, err := onceq.NewMiddleware(s, onceq.WithTypes(onceq.MiddlewareOptions{}, map[string]onceq.TypeOptions{
		"scan:file": {DoneTTL: -time.Second},
	})); err == nil {
		t.Fatal("a negative per-type done TTL was accepted")
	}
}
