package pgledger

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/storage"
)

// StatusStore answers Status from the ledger where it knows the job and
// from Store otherwise; every other method is Store's. Wrap the store that
// `producer status` and GET /v1/jobs/{key} read, so they report the source
// of truth for transactional jobs.
type StatusStore struct {
	storage.Store
	Ledger *Ledger
	// Namespaces are the key namespaces of the jobs that run under the
	// ledger; other keys are read from Store first, and the outbox only
	// for a key Redis does not know, its failure then taken as "unknown",
	// so they are answered while Postgres is down. Default: every
	// namespace.
	Namespaces []string
}

// Status: a done ledger row wins (Redis may have forgotten it); otherwise
// the Redis record says more (a running claim, its lease); then a row in
// the outbox (StatusOutbox), and the ledger's failed row is the fallback.
func (s StatusStore) Status(ctx context.Context, key dedup.Key) (storage.Record, error) {
	if s.Namespaces != nil && !slices.Contains(s.Namespaces, key.Namespace) {
		rec, err := s.Store.Status(ctx, key)
		if err != nil || rec.State != dedup.StatusUnknown {
			return rec, err
		}
		if out, err := s.Ledger.outboxStatus(ctx, key); err == nil && out.State == StatusOutbox {
			return out, nil
		}
		return rec, nil
	}
	row, err := s.Ledger.Status(ctx, key)
	if err != nil || row.State == dedup.StatusDone {
		return row, err
	}
	rec, err := s.Store.Status(ctx, key)
	if err != nil || rec.State != dedup.StatusUnknown {
		return rec, err
	}
	// Committed but not moved yet: Redis cannot know the job.
	if out, err := s.Ledger.outboxStatus(ctx, key); err != nil || out.State == StatusOutbox {
		return out, err
	}
	return row, nil
}

// outboxStatus is key's oldest outbox row as a Record in state
// StatusOutbox, or StatusUnknown when the key has none.
func (l *Ledger) outboxStatus(ctx context.Context, key dedup.Key) (storage.Record, error) {
	rec := storage.Record{Key: key, State: dedup.StatusUnknown}
	err := l.pool.QueryRow(ctx, `SELECT fingerprint, created_at, last_error FROM onceq_outbox
		WHERE key = $1 ORDER BY id LIMIT 1`, key.String()).Scan(&rec.Fingerprint, &rec.FirstSeen, &rec.Error)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return rec, nil
	case err != nil:
		return rec, fmt.Errorf("pgledger: status %q: outbox: %w", key.String(), err)
	}
	rec.State, rec.UpdatedAt = StatusOutbox, rec.FirstSeen
	return rec, nil
}
