package onceq_test

import (
	"context"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/internal/redistest"
)

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
