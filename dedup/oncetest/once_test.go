package oncetest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest"
)

// effect is a handler's side effect, counted.
type effect struct{ n atomic.Int64 }

func (e *effect) handler(result string) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		e.n.Add(1)
		dedup.SetResult(ctx, []byte(result))
		return nil
	})
}

func TestRequireOnceRunsOnce(t *testing.T) {
	t.Parallel()
	var e effect
	task := asynq.NewTask("email:send", []byte(`{"id":"welcome-1","to":"ada@example.com"}`))
	rec := oncetest.RequireOnceWith(t, dedup.MiddlewareOptions{}, e.handler(`{"message_id":"m1"}`), task, 8)
	if e.n.Load() != 1 {
		t.Fatalf("effect ran %d times", e.n.Load())
	}
	want := dedup.Key{Namespace: "email:send", ID: "welcome-1"}
	if rec.Key != want || rec.State != dedup.StatusDone || rec.Attempts != 1 || string(rec.Result) != `{"message_id":"m1"}` {
		t.Fatalf("record %+v", rec)
	}
}

// A run that fails or panics is retried; the one that succeeds is the once.
func TestRequireOnceRetriesFailuresAndPanics(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	h := asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		switch calls.Add(1) {
		case 1:
			return errors.New("smtp 451")
		case 2:
			panic("nil map")
		}
		dedup.SetResult(ctx, []byte("sent"))
		return nil
	})
	rec := oncetest.RequireOnceWith(t, dedup.MiddlewareOptions{}, h, asynq.NewTask("email:send", []byte(`{"id":"flaky"}`)), 4)
	if calls.Load() != 3 || rec.Attempts != 3 || rec.Error != "" || string(rec.Result) != "sent" {
		t.Fatalf("%d calls, record %+v", calls.Load(), rec)
	}
}

type invoice struct {
	InvoiceID string `json:"invoice_id"`
	To        string `json:"to"`
}

type sent struct {
	MessageID string `json:"message_id"`
}

// With the worker's Catalog the task is keyed by the type's own rule (here
// its invoice id, not the content hash), as it is in production; a task
// built by the type's Job carries that key itself.
func TestRequireOnceWithCatalog(t *testing.T) {
	t.Parallel()
	kind := dedup.Define(dedup.Spec[invoice]{Type: "invoice:send", ID: func(p invoice) string { return p.InvoiceID }})
	cat, err := dedup.NewCatalog(kind.Kind)
	if err != nil {
		t.Fatal(err)
	}
	var sends atomic.Int64
	h := dedup.Handle(kind, func(ctx context.Context, p invoice) (sent, error) {
		sends.Add(1)
		run, _ := dedup.RunFromContext(ctx)
		return sent{MessageID: "<" + run.Downstream + "@example.com>"}, nil
	})
	want := dedup.Key{Namespace: "invoice:send", ID: "inv-7"}
	plain := asynq.NewTask("invoice:send", []byte(`{"invoice_id":"inv-7","to":"ada@example.com"}`))
	rec := oncetest.RequireOnceWith(t, dedup.MiddlewareOptions{Catalog: cat}, h, plain, 4)
	if rec.Key != want || string(rec.Result) != `{"message_id":"<invoice:send/inv-7@example.com>"}` {
		t.Fatalf("plain task: %+v", rec)
	}
	job := kind.Job(invoice{InvoiceID: "inv-7", To: "ada@example.com"})
	if rec := oncetest.RequireOnce(t, h, job, 4); rec.Key != want {
		t.Fatalf("the Job's task: %+v", rec)
	}
	if sends.Load() != 2 {
		t.Fatalf("%d sends over two stores, want one each", sends.Load())
	}
}

// reporter is a testing.TB that records how a helper failed it.
type reporter struct {
	testing.TB // nil: only Helper and Fatalf are called
	mu         sync.Mutex
	fatal      []string
}

func (r *reporter) Helper() {}

func (r *reporter) Fatalf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fatal = append(r.fatal, fmt.Sprintf(format, args...))
}

func (r *reporter) failure() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.fatal, "\n")
}

// RequireOnce fails the test, saying why, when the handler never succeeds:
// it always fails (retries spent), its payload is refused for good, or it
// refuses it itself.
func TestRequireOnceFails(t *testing.T) {
	t.Parallel()
	kind := dedup.Define(dedup.Spec[invoice]{Type: "invoice:send",
		Validate: func(p invoice) error {
			if p.To == "" {
				return fmt.Errorf("no recipient: %w", dedup.ErrInvalid)
			}
			return nil
		}})
	refuse := dedup.Handle(kind, func(context.Context, invoice) (sent, error) { return sent{}, nil })
	var tries atomic.Int64
	for _, tt := range []struct {
		name   string
		h      asynq.Handler
		task   *asynq.Task
		n      int
		reason string
	}{
		{"always fails", asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
			tries.Add(1)
			return errors.New("gateway down")
		}), asynq.NewTask("payment:charge", []byte(`{"id":"p-1"}`)), 2, "gateway down"},
		{"bad payload", new(effect).handler(""), asynq.NewTask("email:send", []byte(`{"to":`)), 2, "skip retry"},
		{"refused by the handler", refuse, asynq.NewTask("invoice:send", []byte(`{"invoice_id":"i-1"}`)), 2, "no recipient"},
		{"no deliveries", new(effect).handler(""), asynq.NewTask("email:send", []byte(`{}`)), 0, "0 deliveries"},
	} {
		r := &reporter{}
		rec := oncetest.RequireOnceWith(r, dedup.MiddlewareOptions{}, tt.h, tt.task, tt.n)
		got := r.failure()
		if !strings.Contains(got, tt.reason) || rec.State != "" {
			t.Errorf("%s: failed with %q, returned %+v; want a failure naming %q", tt.name, got, rec, tt.reason)
		}
	}
	if n := tries.Load(); n != 2*26 {
		t.Errorf("an always failing handler ran %d times over two deliveries, want 26 each (asynq's 25 retries)", n)
	}
}
