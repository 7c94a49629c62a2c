package tasks_test

import (
	"testing"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/tasks"
)

// Spec.DoneTTL reaches the middleware through the catalog's kinds; the
// scan's is its scan window.
func TestCatalogDoneTTL(t *testing.T) {
	t.Parallel()
	reports := dedup.Define(dedup.Spec[Invoice]{
		Type:     "report:build",
		ID:       func(i Invoice) string { return i.InvoiceID },
		Validate: func(Invoice) error { return nil },
		DoneTTL:  90 * time.Second,
	})
	c, err := tasks.NewCatalog(tasks.Windows{FileScan: 45 * time.Second}, reports.Kind)
	if err != nil {
		t.Fatal(err)
	}
	opts := doneTTLs(c)
	if got := opts["report:build"]; got != 90*time.Second {
		t.Fatalf("report:build done TTL %v, want 90s", got)
	}
	if got := opts[tasks.TypeEmail]; got != 0 {
		t.Fatalf("email:send done TTL %v, want 0 (the store's)", got)
	}
	if got := opts[tasks.TypeScan]; got != 45*time.Second {
		t.Fatalf("scan:file done TTL %v, want the scan window, 45s", got)
	}
}

// Spec.KeepFailed is on the Kind and in Catalog.KeepFailed, which the
// worker's onceq_blocked_keys gauge reads; no built-in type keeps them.
func TestCatalogKeepFailed(t *testing.T) {
	t.Parallel()
	audits := dedup.Define(dedup.Spec[Invoice]{
		Type:       "audit:file",
		ID:         func(i Invoice) string { return i.InvoiceID },
		Validate:   func(Invoice) error { return nil },
		KeepFailed: true,
	})
	if !audits.Kind.KeepFailed {
		t.Fatal("Kind.KeepFailed not copied from the Spec")
	}
	builtin, err := tasks.NewCatalog(tasks.Windows{})
	if err != nil {
		t.Fatal(err)
	}
	if got := builtin.KeepFailed(); len(got) != 0 {
		t.Fatalf("built-in types keeping failed keys: %v, want none", got)
	}
	c, err := tasks.NewCatalog(tasks.Windows{}, audits.Kind)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.KeepFailed(); len(got) != 1 || got[0] != "audit:file" {
		t.Fatalf("KeepFailed() = %v, want [audit:file]", got)
	}
}

// doneTTLs are the catalog's done TTLs by type, as the middleware reads them.
func doneTTLs(c *tasks.Catalog) map[string]time.Duration {
	m := map[string]time.Duration{}
	for _, k := range c.Kinds() {
		m[k.Type] = k.DoneTTL
	}
	return m
}
