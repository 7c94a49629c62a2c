package dedup_test

import (
	"context"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/dedup/storage"
)

// The middleware completes each type with its TypeOptions.DoneTTL.
func TestMiddlewarePerTypeDoneTTL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := newStore(t, redistest.Client(t), storage.Options{})
	m := newMiddleware(t, s, dedup.WithTypes(dedup.MiddlewareOptions{}, map[string]dedup.TypeOptions{
		"scan:file": {DoneTTL: 30 * time.Second},
	}))
	var e effect
	h := m.Wrap(e.handler("clean"))
	for typ, want := range map[string]time.Duration{"scan:file": 30 * time.Second, "email:send": 24 * time.Hour} {
		k := mustKey(t, typ, "f-1")
		task := asynq.NewTaskWithHeaders(typ, []byte(`{}`), map[string]string{dedup.HeaderKey: k.String()})
		if err := h.ProcessTask(ctx, task); err != nil {
			t.Fatal(err)
		}
		if r, _ := s.Status(ctx, k); r.State != dedup.StatusDone || r.ExpiresIn > want || r.ExpiresIn < want-time.Minute/2 {
			t.Errorf("%s: %+v; want done expiring within %v", typ, r, want)
		}
	}
	if _, err := dedup.NewMiddleware(s, dedup.WithTypes(dedup.MiddlewareOptions{}, map[string]dedup.TypeOptions{
		"scan:file": {DoneTTL: -time.Second},
	})); err == nil {
		t.Fatal("a negative per-type done TTL was accepted")
	}
}
