package pgledger

import (
	"context"
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

// Handler runs h as an asynq handler under the ledger. Mount it behind the
// dedup middleware: the key comes from the claim (else from the task's
// headers or payload, as the middleware would derive it), and the result,
// stored or fresh, goes to the middleware's record.
func (l *Ledger) Handler(h TxHandler) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		key, err := keyOf(ctx, t)
		if err != nil {
			return fmt.Errorf("pgledger: %s: %w: %w", t.Type(), err, asynq.SkipRetry)
		}
		out, err := l.Run(ctx, key, t.Headers()[dedup.HeaderFingerprint], func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
			return h.ProcessTx(ctx, tx, t)
		})
		if err != nil {
			if errors.Is(err, dedup.ErrMismatch) {
				return fmt.Errorf("%w: %w", err, asynq.SkipRetry)
			}
			return err
		}
		dedup.SetResult(ctx, out.Result)
		return nil
	})
}

func keyOf(ctx context.Context, t *asynq.Task) (dedup.Key, error) {
	if k, ok := dedup.KeyFromContext(ctx); ok {
		return k, nil
	}
	if k, err := dedup.ParseKey(t.Headers()[dedup.HeaderKey]); err == nil && k.Namespace == t.Type() {
		return k, nil
	}
	k, _, err := dedup.Derive(t.Type(), t.Payload(), "", nil)
	return k, err
}
