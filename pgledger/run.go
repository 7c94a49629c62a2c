package pgledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/onceq/onceq/dedup"
)

// Outcome is what Run did.
type Outcome struct {
	// Duplicate: the row was done already; nothing ran, Result is the stored one.
	Duplicate bool
	Result    []byte
	// Attempts counts runs of the key, this one included.
	Attempts int
}

// Work is a unit of work inside the job's transaction; its result is
// stored with the done row and replayed to duplicates.
type Work func(ctx context.Context, tx pgx.Tx) (result []byte, err error)

// failedRecordTimeout bounds the write that records a failed attempt.
const failedRecordTimeout = 5 * time.Second

// Run runs work exactly once for key: in one transaction it locks the
// key's row, returns the stored result if it is done, else runs work and
// marks the row done. Another fingerprint is dedup.ErrConflict only for a done
// row; fingerprint "" skips that check. A work error
// or panic rolls back the effects and the row alike.
func (l *Ledger) Run(ctx context.Context, key dedup.Key, fingerprint string, work Work) (Outcome, error) {
	if l.opts.NoRecord {
		var res []byte
		err := pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) (err error) {
			res, err = work(ctx, tx)
			return err
		})
		return Outcome{Result: res, Attempts: 1}, err
	}
	var out Outcome
	err := pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
		var (
			state, stored string
			result        []byte
		)
		// An upsert rather than SELECT ... FOR UPDATE: it takes the row lock
		// even when the row does not exist yet, and under READ COMMITTED it
		// returns the latest committed row, so a delivery that waited on the
		// lock sees the done row its rival committed.
		err := tx.QueryRow(ctx, `INSERT INTO onceq_ledger AS l (key, state, fingerprint)
			VALUES ($1, 'running', $2)
			ON CONFLICT (key) DO UPDATE SET updated_at = l.updated_at
			RETURNING l.state, l.fingerprint, l.result, l.attempts`, key.String(), fingerprint).
			Scan(&state, &stored, &result, &out.Attempts)
		if err != nil {
			return fmt.Errorf("pgledger: lock %q: %w", key.String(), err)
		}
		done := state == string(dedup.StatusDone)
		// As in the Redis record: a failed row never blocks a new
		// incarnation of the key, whose corrected payload is stored below.
		if done && fingerprint != "" && stored != "" && stored != fingerprint {
			return fmt.Errorf("%w: %q stored %s, task %s", dedup.ErrConflict, key.String(), stored, fingerprint)
		}
		if done {
			out.Duplicate, out.Result = true, result
			return errDuplicate // roll back the no-op update
		}
		res, err := work(ctx, tx)
		if err != nil {
			return err
		}
		out.Attempts++
		out.Result = res
		_, err = tx.Exec(ctx, `UPDATE onceq_ledger SET state = 'done', attempts = $2, result = $3, error = '',
			fingerprint = COALESCE(NULLIF($4, ''), fingerprint), updated_at = now(), completed_at = now() WHERE key = $1`,
			key.String(), out.Attempts, res, fingerprint)
		if err != nil {
			return fmt.Errorf("pgledger: record %q: %w", key.String(), err)
		}
		return nil
	})
	switch {
	case errors.Is(err, errDuplicate):
		l.opts.Observer(ctx, dedup.Event{Op: "claim", Key: key, Outcome: dedup.Duplicate,
			Reason: "postgres ledger: done (the Redis record was missing)"})
		return out, nil
	case err != nil:
		if !errors.Is(err, dedup.ErrConflict) {
			l.recordFailure(ctx, key, fingerprint, err)
		}
		return Outcome{}, err
	}
	return out, nil
}

var errDuplicate = errors.New("pgledger: duplicate")

// recordFailure notes a rolled-back attempt for status readers, in its own
// statement; it never touches a done row. Best effort: the job's own error
// is what asynq acts on.
func (l *Ledger) recordFailure(ctx context.Context, key dedup.Key, fingerprint string, cause error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), failedRecordTimeout)
	defer cancel()
	_, _ = l.pool.Exec(ctx, `INSERT INTO onceq_ledger AS l (key, state, fingerprint, attempts, error)
		VALUES ($1, 'failed', $2, 1, $3)
		ON CONFLICT (key) DO UPDATE SET state = 'failed', attempts = l.attempts + 1, error = EXCLUDED.error, updated_at = now()
		WHERE l.state <> 'done'`, key.String(), fingerprint, truncate(cause.Error(), 1024))
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
