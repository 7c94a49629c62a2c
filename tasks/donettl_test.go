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
