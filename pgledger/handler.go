package pgledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"

	"github.com/onceq/onceq/dedup"
)

// TxHandler is a task handler whose effects are statements on tx. It must
// not commit or roll back tx, nor write anywhere else that cannot roll back.
type TxHandler interface {
	ProcessTx(ctx context.Context, tx pgx.Tx, t *asynq.Task) (result []byte, err error)
}

// TxHandlerFunc adapts a function to TxHandler.
type TxHandlerFunc func(ctx context.Context, tx pgx.Tx, t *asynq.Task) ([]byte, error)

// ProcessTx implements TxHandler.
func (f TxHandlerFunc) ProcessTx(ctx context.Context, tx pgx.Tx, t *asynq.Task) ([]byte, error) {
	return f(ctx, tx, t)
}

// Handler runs h as an asynq handler under the ledger. Mount it behind
// onceq's middleware (an dedup.Server): the key and fingerprint are the
// run's, and the result, stored or fresh, goes to the middleware's record.
func (l *Ledger) Handler(h TxHandler) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		run, ok := dedup.RunFromContext(ctx)
		if !ok {
			return fmt.Errorf("pgledger: %s: no onceq run in the context: mount Ledger.Handler behind onceq's middleware: %w", t.Type(), asynq.SkipRetry)
		}
		out, err := l.Run(ctx, run.Key, run.Fingerprint, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
			return h.ProcessTx(ctx, tx, t)
		})
		if err != nil {
			if errors.Is(err, dedup.ErrConflict) {
				return fmt.Errorf("%w: %w", err, asynq.SkipRetry)
			}
			return err
		}
		dedup.SetResult(ctx, out.Result)
		return nil
	})
}

// Handle binds fn to t's type under the ledger: dedup.Handle decodes and
// validates the payload, fn's statements on tx commit together with the
// ledger's record of the run, and a run the ledger already holds answers
// with its stored result instead of running fn again. Mount it behind
// onceq's middleware (an dedup.Server).
func Handle[P, R any](l *Ledger, t *dedup.Typed[P], fn func(ctx context.Context, tx pgx.Tx, p P) (R, error)) asynq.Handler {
	return dedup.Handle(t, func(ctx context.Context, p P) (R, error) {
		var r R
		run, _ := dedup.RunFromContext(ctx) // dedup.Handle always sets it
		out, err := l.Run(ctx, run.Key, run.Fingerprint, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
			res, err := fn(ctx, tx, p)
			if err != nil {
				return nil, err
			}
			return json.Marshal(res)
		})
		switch {
		case errors.Is(err, dedup.ErrConflict):
			return r, fmt.Errorf("%w: %w", err, asynq.SkipRetry)
		case err != nil:
			return r, err
		}
		if err := json.Unmarshal(out.Result, &r); err != nil {
			return r, fmt.Errorf("pgledger: %s: stored result: %w", run.Key.String(), err)
		}
		return r, nil
	})
}
