package tasks_test

import (
	"context"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/tasks"
)

// Spec.DoneTTL reaches the middleware through Catalog.TypeOptions, picked
// from the catalog's windows.
func TestCatalogDoneTTL(t *testing.T) {
	t.Parallel()
	reports := tasks.Define(tasks.Spec[Invoice]{
		Type:     "report:build",
		ID:       func(i Invoice) string { return i.InvoiceID },
		Validate: func(Invoice) error { return nil },
		DoneTTL:  func(w tasks.Windows) time.Duration { return 2 * w.FileScan },
		Handler: func(tasks.Deps) asynq.Handler {
			return asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil })
		},
	})
	c, err := tasks.NewCatalog(tasks.Windows{FileScan: 45 * time.Second}, append(tasks.Builtin(), reports.Kind())...)
	if err != nil {
		t.Fatal(err)
	}
	opts := c.TypeOptions()
	if got := opts["report:build"].DoneTTL; got != 90*time.Second {
		t.Fatalf("report:build done TTL %v, want 90s", got)
	}
	if got := opts[tasks.TypeEmail].DoneTTL; got != 0 {
		t.Fatalf("email:send done TTL %v, want 0 (the store's)", got)
	}
}

// Spec.KeepFailed is on the Kind and in Catalog.KeepFailed, which the
// worker's onceq_blocked_keys gauge reads; no built-in type keeps them.
func TestCatalogKeepFailed(t *testing.T) {
	t.Parallel()
	audits := tasks.Define(tasks.Spec[Invoice]{
		Type:       "audit:file",
		ID:         func(i Invoice) string { return i.InvoiceID },
		Validate:   func(Invoice) error { return nil },
		KeepFailed: true,
		Handler: func(tasks.Deps) asynq.Handler {
			return asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil })
		},
	})
	if !audits.Kind().KeepFailed {
		t.Fatal("Kind.KeepFailed not copied from the Spec")
	}
	builtin, err := tasks.NewCatalog(tasks.Windows{})
	if err != nil {
		t.Fatal(err)
	}
	if got := builtin.KeepFailed(); len(got) != 0 {
		t.Fatalf("built-in types keeping failed keys: %v, want none", got)
	}
	c, err := tasks.NewCatalog(tasks.Windows{}, append(tasks.Builtin(), audits.Kind())...)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.KeepFailed(); len(got) != 1 || got[0] != "audit:file" {
		t.Fatalf("KeepFailed() = %v, want [audit:file]", got)
	}
}
