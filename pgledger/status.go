package pgledger

import (
	"context"
	"slices"

	"github.com/onceq/onceq"
)

// StatusStore answers Status from the ledger where it knows the job and
// from Store otherwise; every other method is Store's. Wrap the store that
// `producer status` and GET /v1/jobs/{key} read, so they report the source
// of truth for transactional jobs.
type StatusStore struct {
	onceq.Store
	Ledger *Ledger
	// Namespaces are the key namespaces of the jobs that run under the
	// ledger; other keys are read from Store alone, so they are answered
	// while Postgres is down. Default: every namespace.
	Namespaces []string
}

// Status: a done ledger row wins (Redis may have forgotten it); otherwise
// the Redis record says more (a running claim, its lease), and the ledger's
// failed row is the fallback.
func (s StatusStore) Status(ctx context.Context, key onceq.Key) (onceq.Record, error) {
	if s.Namespaces != nil && !slices.Contains(s.Namespaces, key.Namespace) {
		return s.Store.Status(ctx, key)
	}
	row, err := s.Ledger.Status(ctx, key)
	if err != nil || row.State == onceq.StatusDone {
		return row, err
	}
	rec, err := s.Store.Status(ctx, key)
	if err != nil || rec.State != onceq.StatusUnknown {
		return rec, err
	}
	return row, nil
}
