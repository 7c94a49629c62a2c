package pgledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/storage"
)

// Options configures a Ledger.
type Options struct {
	// NoRecord runs transactional handlers in their transaction without
	// reading or writing the ledger: Redis alone deduplicates, so a crash
	// between commit and the Redis completion, or a Redis that forgot, runs
	// the job again. It exists to measure what the ledger buys.
	// Default: false.
	NoRecord bool
	// Observer sees the ledger's own decisions: a delivery the Redis claim
	// let through that the ledger found done. Default: none.
	Observer dedup.Observer
}

// Ledger is the Postgres record of transactional jobs.
type Ledger struct {
	pool *pgxpool.Pool
	opts Options
}

// New returns a Ledger on pool; call Migrate once at start-up.
func New(pool *pgxpool.Pool, opts Options) *Ledger {
	if opts.Observer == nil {
		opts.Observer = func(context.Context, dedup.Event) {}
	}
	return &Ledger{pool: pool, opts: opts}
}

// Open connects a pool to url with at most maxConns connections (0: pgx's
// default, the larger of 4 and the CPU count), applies the ledger's
// migrations and returns the Ledger; Close closes its pool.
func Open(ctx context.Context, url string, maxConns int32, opts Options) (*Ledger, error) {
	l, err := Connect(url, maxConns, opts)
	if err != nil {
		return nil, err
	}
	if err := l.Setup(ctx); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// Connect is Open without any I/O: the pool dials on first use, so an
// unreachable Postgres is not an error yet. A process that can run without
// Postgres calls Setup until it succeeds.
func Connect(url string, maxConns int32, opts Options) (*Ledger, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// pgx's message can quote the URL, password included.
		return nil, errors.New("pgledger: cannot parse the Postgres URL (value not shown)")
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, fmt.Errorf("pgledger: connect: %w", err)
	}
	return New(pool, opts), nil
}

// Setup checks that Postgres answers and applies the ledger's migrations.
func (l *Ledger) Setup(ctx context.Context) error {
	if err := l.pool.Ping(ctx); err != nil {
		return fmt.Errorf("pgledger: connect: %w", err)
	}
	ms, err := LedgerMigrations()
	if err != nil {
		return err
	}
	return Migrate(ctx, l.pool, "ledger", ms)
}

// Close closes the ledger's pool.
func (l *Ledger) Close() { l.pool.Close() }

// Pool is the ledger's connection pool.
func (l *Ledger) Pool() *pgxpool.Pool { return l.pool }

// Status reads key's ledger row as a storage.Record; State is dedup.StatusUnknown
// when there is none. Only committed rows are seen.
func (l *Ledger) Status(ctx context.Context, key dedup.Key) (storage.Record, error) {
	rec := storage.Record{Key: key, State: dedup.StatusUnknown}
	var (
		state     string
		completed *time.Time
	)
	err := l.pool.QueryRow(ctx, `SELECT state, fingerprint, attempts, result, error, first_seen, updated_at, completed_at
		FROM onceq_ledger WHERE key = $1`, key.String()).
		Scan(&state, &rec.Fingerprint, &rec.Attempts, &rec.Result, &rec.Error, &rec.FirstSeen, &rec.UpdatedAt, &completed)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return rec, nil
	case err != nil:
		return rec, fmt.Errorf("pgledger: status %q: %w", key.String(), err)
	}
	rec.State = dedup.Status(state)
	if completed != nil {
		rec.CompletedAt = *completed
	}
	return rec, nil
}

// Prune deletes done rows completed before cutoff, and failed rows last
// attempted before it, and returns how many. After that a redelivered job
// runs again: keep cutoff beyond any redelivery the application can
// produce. (A failed row never blocks a run; it only tells Status why.)
func (l *Ledger) Prune(ctx context.Context, cutoff time.Time) (int64, error) {
	tag, err := l.pool.Exec(ctx, `DELETE FROM onceq_ledger
		WHERE (state = 'done' AND completed_at < $1) OR (state = 'failed' AND updated_at < $1)`, cutoff)
	if err != nil {
		return 0, fmt.Errorf("pgledger: prune: %w", err)
	}
	return tag.RowsAffected(), nil
}
