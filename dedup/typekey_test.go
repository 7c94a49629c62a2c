package dedup_test

import (
	"context"
	"errors"
	"testing"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/dedup/storage"
)

// TypeOptions.Key keys a task that carries no key of its own; a task with
// the producer's header keeps that one, and a Key error is a bad payload.
func TestMiddlewareTypeKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := newStore(t, redistest.Client(t), storage.Options{})
	refused := errors.New("no payment_id")
	m := newMiddleware(t, s, dedup.WithTypes(dedup.MiddlewareOptions{}, map[string]dedup.TypeOptions{
		"payment:charge": {Key: func(payload []byte) (dedup.Key, string, error) {
			if string(payload) == "bad" {
				return dedup.Key{}, "", refused
			}
			return dedup.Key{Namespace: "payment:charge", ID: "by-rule"}, "fp-rule", nil
		}},
	}))
	var keys []string
	h := m.Wrap(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		k, _ := dedup.KeyFromContext(ctx)
		keys = append(keys, k.String())
		return nil
	}))
	for _, task := range []*asynq.Task{
		asynq.NewTask("payment:charge", []byte(`{"a":1}`)),
		asynq.NewTaskWithHeaders("payment:charge", []byte(`{"a":1}`), map[string]string{dedup.HeaderKey: "payment:charge/by-header"}),
	} {
		if err := h.ProcessTask(ctx, task); err != nil {
			t.Fatal(err)
		}
	}
	if len(keys) != 2 || keys[0] != "payment:charge/by-rule" || keys[1] != "payment:charge/by-header" {
		t.Fatalf("keys %q, want the rule's, then the header's", keys)
	}
	if r, _ := s.Status(ctx, dedup.Key{Namespace: "payment:charge", ID: "by-rule"}); r.Fingerprint != "fp-rule" {
		t.Fatalf("record %+v, want the rule's fingerprint", r)
	}
	if err := h.ProcessTask(ctx, asynq.NewTask("payment:charge", []byte("bad"))); !errors.Is(err, refused) || !errors.Is(err, asynq.SkipRetry) || len(keys) != 2 {
		t.Fatalf("refused payload: %v after %d runs, want the rule's error with SkipRetry and no run", err, len(keys))
	}
}
