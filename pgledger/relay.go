package pgledger

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/storage"
)

// RelayOptions configures NewRelay.
type RelayOptions struct {
	// Producer enqueues the moved jobs. Required.
	Producer *dedup.Producer
	// Batch is how many rows one relay transaction locks and moves.
	// Default: 100.
	Batch int
	// Parallel is how many enqueues of a batch are in flight at once
	// (a batch holds at most one row per key). Default: 8.
	Parallel int
	// Poll is how often the relay looks for rows when no NOTIFY wakes it:
	// the fallback while its listening connection is down. Default: 1s.
	Poll time.Duration
	// Retry is how long a row whose move failed (Redis unreachable) waits
	// before it is tried again. Default: 1s.
	Retry time.Duration
	// Observer sees every move, Op "relay": the Producer's decision
	// (enqueued, duplicate, conflict, throttled) or "error". Default: none.
	Observer dedup.Observer
}

// opRelay names the relay's events.
const opRelay = "relay"

// batchTimeout bounds one batch once its rows are locked: it finishes
// after the caller's ctx ends, so a shutdown does not redo its enqueues.
const batchTimeout = 30 * time.Second

// Relay moves committed outbox rows into asynq through a Producer. Any
// number run side by side, in workers (ONCEQ_OUTBOX=on) or processes of
// their own: each batch locks its rows FOR UPDATE SKIP LOCKED, and only a
// key's oldest row is eligible, so no two relays move one row at once and a
// key's jobs are enqueued in commit order. A relay killed mid-batch leaves
// its rows to the next one, whose enqueue of a job already in asynq is a
// Duplicate (the key is the task id): the row is deleted, nothing runs
// twice.
//
// The relay owns the outbox table: it deletes each row once the Producer
// has answered for it (enqueued, duplicate, or a conflict with a job of the
// key enqueued some other way, which the Observer sees). A throttled row
// waits for its window's RetryAfter, and a row whose enqueue failed for
// Retry; both keep their place in their key's order.
type Relay struct {
	pool *pgxpool.Pool
	opts RelayOptions
}

// NewRelay returns a relay on pool, whose database holds the outbox
// (LedgerMigrations).
func NewRelay(pool *pgxpool.Pool, opts RelayOptions) (*Relay, error) {
	if opts.Batch == 0 {
		opts.Batch = 100
	}
	if opts.Parallel == 0 {
		opts.Parallel = 8
	}
	if opts.Poll == 0 {
		opts.Poll = time.Second
	}
	if opts.Retry == 0 {
		opts.Retry = time.Second
	}
	if opts.Observer == nil {
		opts.Observer = func(context.Context, dedup.Event) {}
	}
	switch {
	case pool == nil:
		return nil, errors.New("pgledger: relay: no pool")
	case opts.Producer == nil:
		return nil, errors.New("pgledger: relay: RelayOptions.Producer is required")
	case opts.Batch < 1 || opts.Parallel < 1 || opts.Poll < time.Millisecond || opts.Retry < time.Millisecond:
		return nil, fmt.Errorf("pgledger: relay: Batch and Parallel must be at least 1, Poll and Retry at least 1ms (got %d, %d, %s, %s)",
			opts.Batch, opts.Parallel, opts.Poll, opts.Retry)
	}
	return &Relay{pool: pool, opts: opts}, nil
}

// Run moves rows until ctx ends, woken by NOTIFY and every Poll; it
// returns nil then. Errors (Postgres or Redis away) are reported to the
// Observer and retried.
func (r *Relay) Run(ctx context.Context) error {
	wake := make(chan struct{}, 1)
	var wg sync.WaitGroup
	wg.Go(func() { r.listen(ctx, wake) })
	defer wg.Wait()
	for {
		n, err := r.Move(ctx)
		if ctx.Err() != nil {
			return nil
		}
		wait := r.opts.Poll
		switch {
		case err != nil:
			r.opts.Observer(ctx, dedup.Event{Op: opRelay, Outcome: storage.Errored, Reason: err.Error()})
			wait = r.opts.Retry
		case n > 0:
			// Moving a key's row makes its next row eligible: look again.
			continue
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-wake:
		case <-t.C:
		}
		t.Stop()
	}
}

// listen holds a connection of its own that LISTENs on the outbox channel
// and wakes Run on each notification; it reconnects after Retry, and wakes
// Run then too, for what it missed meanwhile.
func (r *Relay) listen(ctx context.Context, wake chan<- struct{}) {
	signal := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	for ctx.Err() == nil {
		pc, err := r.pool.Acquire(ctx)
		if err == nil {
			// Hijacked: a listening connection must not go back to the pool.
			conn := pc.Hijack()
			if _, err = conn.Exec(ctx, "LISTEN "+outboxChannel); err == nil {
				signal()
				for err == nil {
					if _, err = conn.WaitForNotification(ctx); err == nil {
						signal()
					}
				}
			}
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			conn.Close(cctx)
			cancel()
		}
		t := time.NewTimer(r.opts.Retry)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
}

// Move moves one batch: it locks up to Batch eligible rows (each the
// oldest of its key, available now, not locked by another relay), enqueues
// them, deletes those the Producer answered for and postpones the others,
// and commits. It returns how many rows it locked.
func (r *Relay) Move(ctx context.Context) (int, error) {
	tx, err := r.pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("pgledger: relay: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	rows, err := tx.Query(ctx, `SELECT id, key, fingerprint, task_type, payload, headers, queue, policy, attempts
		FROM onceq_outbox o
		WHERE available_at <= now()
		  AND NOT EXISTS (SELECT 1 FROM onceq_outbox p WHERE p.key = o.key AND p.id < o.id)
		ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED`, r.opts.Batch)
	if err != nil {
		return 0, fmt.Errorf("pgledger: relay: %w", err)
	}
	batch, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (outboxRow, error) {
		var o outboxRow
		err := row.Scan(&o.id, &o.key, &o.fingerprint, &o.taskType, &o.payload, &o.headers, &o.queue, &o.policy, &o.attempts)
		return o, err
	})
	if err != nil {
		return 0, fmt.Errorf("pgledger: relay: %w", err)
	}
	if len(batch) == 0 {
		return 0, nil
	}
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), batchTimeout)
	defer cancel()
	moves := r.enqueue(bctx, batch)

	var done []int64
	later := &pgx.Batch{}
	var firstErr error
	for i, m := range moves {
		switch {
		case m.skipped:
		case m.err != nil:
			if firstErr == nil {
				firstErr = m.err
			}
			later.Queue(postpone, batch[i].id, r.opts.Retry.Microseconds(), truncate(m.err.Error(), 1024))
		case m.out.Decision == dedup.Throttled:
			later.Queue(postpone, batch[i].id, max(m.out.RetryAfter, time.Millisecond).Microseconds(), m.out.Reason)
		default:
			done = append(done, batch[i].id)
		}
	}
	if len(done) > 0 {
		later.Queue(`DELETE FROM onceq_outbox WHERE id = ANY($1)`, done)
	}
	if later.Len() > 0 {
		if err := tx.SendBatch(bctx, later).Close(); err != nil {
			return len(batch), fmt.Errorf("pgledger: relay: %w", err)
		}
	}
	if err := tx.Commit(bctx); err != nil {
		return len(batch), fmt.Errorf("pgledger: relay: commit: %w", err)
	}
	return len(batch), firstErr
}

// postpone keeps a row for a later move: $2 microseconds from now.
const postpone = `UPDATE onceq_outbox SET available_at = now() + $2::bigint * interval '1 microsecond',
	attempts = attempts + 1, last_error = $3 WHERE id = $1`

// move is one row's enqueue.
type move struct {
	out     dedup.Outcome
	err     error
	skipped bool // not tried: an earlier enqueue of the batch failed
}

// enqueue hands each row's job to the Producer, Parallel at a time. After
// a failure (Redis away) the rest of the batch is not tried: it would only
// wait on the same timeout.
func (r *Relay) enqueue(ctx context.Context, batch []outboxRow) []move {
	moves := make([]move, len(batch))
	var (
		next   atomic.Int64
		failed atomic.Bool
		wg     sync.WaitGroup
	)
	for range min(r.opts.Parallel, len(batch)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(batch) {
					return
				}
				if failed.Load() {
					moves[i].skipped = true
					continue
				}
				m := &moves[i]
				j, err := batch[i].job()
				if err != nil {
					m.err = fmt.Errorf("pgledger: relay: outbox row %d (%s): %w", batch[i].id, batch[i].key, err)
				} else {
					m.out, m.err = r.opts.Producer.Enqueue(ctx, j)
				}
				if m.err != nil {
					failed.Store(true)
					r.opts.Observer(ctx, dedup.Event{Op: opRelay, Key: j.Key, Outcome: storage.Errored, Reason: m.err.Error()})
					continue
				}
				r.opts.Observer(ctx, dedup.Event{Op: opRelay, Key: j.Key, Outcome: m.out.Decision, Reason: m.out.Reason})
			}
		})
	}
	wg.Wait()
	return moves
}
