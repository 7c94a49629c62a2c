package pgledger_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/storage"
	"github.com/onceq/onceq/pgledger"
)

func key(t *testing.T, id string) dedup.Key {
	t.Helper()
	k, err := dedup.NewKey("order:fulfil", id)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// insertEffect is a unit of work: one application row per run.
func insertEffect(k dedup.Key, result string) pgledger.Work {
	return func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
		_, err := tx.Exec(ctx, `INSERT INTO effects (key, n) VALUES ($1, 1)`, k.String())
		return []byte(result), err
	}
}

func status(t *testing.T, l *pgledger.Ledger, k dedup.Key) storage.Record {
	t.Helper()
	rec, err := l.Status(context.Background(), k)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// A handler error rolls back its effect and the done record together; the
// failed attempt is recorded; the retry commits once; later deliveries are
// duplicates that replay the result without running.
func TestRunErrorRollsBackThenRetryCommitsOnce(t *testing.T) {
	t.Parallel()
	l, pool := newLedger(t, pgledger.Options{})
	ctx := context.Background()
	k := key(t, "rollback-1")
	boom := errors.New("downstream refused")

	_, err := l.Run(ctx, k, "fp1", func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
		if _, err := insertEffect(k, "")(ctx, tx); err != nil {
			return nil, err
		}
		return nil, boom // after the effect was written in tx
	})
	if !errors.Is(err, boom) {
		t.Fatalf("first run: %v, want the handler's error", err)
	}
	if n := effects(t, pool, k.String()); n != 0 {
		t.Fatalf("after the failed run: %d effect rows, want 0 (rolled back)", n)
	}
	if rec := status(t, l, k); rec.State != dedup.StatusFailed || rec.Attempts != 1 || rec.Error != boom.Error() {
		t.Fatalf("after the failed run: %+v, want failed, 1 attempt, the error", rec)
	}

	out, err := l.Run(ctx, k, "fp1", insertEffect(k, `{"ok":1}`))
	if err != nil || out.Duplicate || out.Attempts != 2 {
		t.Fatalf("retry: %+v %v, want a fresh run, attempt 2", out, err)
	}
	if n := effects(t, pool, k.String()); n != 1 {
		t.Fatalf("after the retry: %d effect rows, want 1", n)
	}
	rec := status(t, l, k)
	if rec.State != dedup.StatusDone || string(rec.Result) != `{"ok":1}` || rec.Error != "" || rec.CompletedAt.IsZero() {
		t.Fatalf("after the retry: %+v, want done with the result", rec)
	}

	if rec.Fingerprint != "fp1" || rec.Attempts != 2 {
		t.Fatalf("after the retry: fingerprint %q, attempts %d; want fp1, 2", rec.Fingerprint, rec.Attempts)
	}
	for range 3 {
		out, err = l.Run(ctx, k, "fp1", insertEffect(k, "again"))
		if err != nil || !out.Duplicate || string(out.Result) != `{"ok":1}` {
			t.Fatalf("redelivery: %+v %v, want a duplicate replaying the stored result", out, err)
		}
	}
	if n := effects(t, pool, k.String()); n != 1 {
		t.Fatalf("after redeliveries: %d effect rows, want 1", n)
	}
}

// A panic rolls back like an error and reaches the caller (asynq recovers it).
func TestRunPanicRollsBack(t *testing.T) {
	t.Parallel()
	l, pool := newLedger(t, pgledger.Options{})
	k := key(t, "panic-1")
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the panic did not reach the caller")
			}
		}()
		l.Run(context.Background(), k, "", func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
			insertEffect(k, "")(ctx, tx)
			panic("handler bug")
		})
	}()
	if n := effects(t, pool, k.String()); n != 0 {
		t.Fatalf("%d effect rows after a panic, want 0", n)
	}
	if rec := status(t, l, k); rec.State == dedup.StatusDone {
		t.Fatalf("%+v after a panic, want not done", rec)
	}
}

// The session dying between the effect and the commit (what kill -9 of the
// worker does to it) leaves neither the effect nor the record.
func TestRunSessionDiesBeforeCommit(t *testing.T) {
	t.Parallel()
	l, pool := newLedger(t, pgledger.Options{})
	k := key(t, "crash-1")
	_, err := l.Run(context.Background(), k, "", func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
		if _, err := insertEffect(k, "")(ctx, tx); err != nil {
			return nil, err
		}
		_, err := tx.Exec(ctx, `SELECT pg_terminate_backend(pg_backend_pid())`)
		return nil, err
	})
	if err == nil {
		t.Fatal("run survived its own session's death")
	}
	if n := effects(t, pool, k.String()); n != 0 {
		t.Fatalf("%d effect rows, want 0", n)
	}
	if out, err := l.Run(context.Background(), k, "", insertEffect(k, "")); err != nil || out.Duplicate {
		t.Fatalf("next delivery: %+v %v, want a fresh run", out, err)
	}
	if n := effects(t, pool, k.String()); n != 1 {
		t.Fatalf("%d effect rows after the next delivery, want 1", n)
	}
}

// Concurrent deliveries of one key, with no Redis claim in front: the row
// lock serialises them and exactly one runs.
func TestRunConcurrentDeliveriesRunOnce(t *testing.T) {
	t.Parallel()
	l, pool := newLedger(t, pgledger.Options{})
	k := key(t, "race-1")
	var ran, dups atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			out, err := l.Run(context.Background(), k, "fp", func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
				ran.Add(1)
				return insertEffect(k, "r")(ctx, tx)
			})
			if err != nil {
				t.Error(err)
			}
			if out.Duplicate {
				dups.Add(1)
			}
		})
	}
	wg.Wait()
	if ran.Load() != 1 || dups.Load() != 7 || effects(t, pool, k.String()) != 1 {
		t.Fatalf("ran %d, duplicates %d, effect rows %d; want 1, 7, 1", ran.Load(), dups.Load(), effects(t, pool, k.String()))
	}
}

func TestRunMismatch(t *testing.T) {
	t.Parallel()
	l, pool := newLedger(t, pgledger.Options{})
	k := key(t, "mismatch-1")
	if _, err := l.Run(context.Background(), k, "fp-a", insertEffect(k, "")); err != nil {
		t.Fatal(err)
	}
	_, err := l.Run(context.Background(), k, "fp-b", insertEffect(k, ""))
	if !errors.Is(err, dedup.ErrConflict) {
		t.Fatalf("other payload under the same key: %v, want ErrMismatch", err)
	}
	if n := effects(t, pool, k.String()); n != 1 {
		t.Fatalf("%d effect rows, want 1", n)
	}
}

// A failed row never blocks the key's next incarnation, with a corrected
// payload: it runs, and its fingerprint is the one a done row then guards.
func TestRunFailedRowTakesOtherFingerprint(t *testing.T) {
	t.Parallel()
	l, pool := newLedger(t, pgledger.Options{})
	k := key(t, "incarnation-1")
	boom := errors.New("declined")
	if _, err := l.Run(context.Background(), k, "fp-a", func(context.Context, pgx.Tx) ([]byte, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("first incarnation: %v, want its error", err)
	}
	if _, err := l.Run(context.Background(), k, "fp-b", insertEffect(k, "")); err != nil {
		t.Fatalf("next incarnation with a corrected payload: %v", err)
	}
	if _, err := l.Run(context.Background(), k, "fp-a", insertEffect(k, "")); !errors.Is(err, dedup.ErrConflict) {
		t.Fatalf("the old payload after the done row: %v, want ErrMismatch", err)
	}
	if n := effects(t, pool, k.String()); n != 1 {
		t.Fatalf("%d effect rows, want 1", n)
	}
}

// NoRecord is the comparison mode: every run runs.
func TestRunNoRecordRunsEveryTime(t *testing.T) {
	t.Parallel()
	l, pool := newLedger(t, pgledger.Options{NoRecord: true})
	k := key(t, "norecord-1")
	for range 2 {
		if _, err := l.Run(context.Background(), k, "", insertEffect(k, "")); err != nil {
			t.Fatal(err)
		}
	}
	if n := effects(t, pool, k.String()); n != 2 {
		t.Fatalf("%d effect rows, want 2 (no ledger)", n)
	}
}

// Prune removes done rows completed and failed rows last attempted before
// the cutoff, and only those.
func TestPrune(t *testing.T) {
	t.Parallel()
	l, _ := newLedger(t, pgledger.Options{})
	ctx := context.Background()
	old, failed := key(t, "prune-old"), key(t, "prune-failed")
	if _, err := l.Run(ctx, old, "", insertEffect(old, "")); err != nil {
		t.Fatal(err)
	}
	l.Run(ctx, failed, "", func(context.Context, pgx.Tx) ([]byte, error) { return nil, errors.New("no") })
	if n, err := l.Prune(ctx, time.Now().Add(-time.Hour)); err != nil || n != 0 {
		t.Fatalf("prune before the rows: %d %v, want 0", n, err)
	}
	if n, err := l.Prune(ctx, time.Now().Add(time.Hour)); err != nil || n != 2 {
		t.Fatalf("prune after the rows: %d %v, want 2 (the done and the failed row)", n, err)
	}
	for _, k := range []dedup.Key{old, failed} {
		if rec := status(t, l, k); rec.State != dedup.StatusUnknown {
			t.Fatalf("pruned row: %+v", rec)
		}
	}
}
