package tasks

import (
	"context"
	"fmt"

	"go.uber.org/zap"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
)

// downstream is the key a handler passes downstream: dedup.Handle puts the
// run in every handler's ctx.
func downstream(ctx context.Context) string {
	r, _ := dedup.RunFromContext(ctx)
	return r.Downstream
}

func logger(l *zap.Logger) *zap.Logger {
	if l == nil {
		return zap.NewNop()
	}
	return l
}

// permanent marks err as one asynq must not retry.
func permanent(err error) error {
	return fmt.Errorf("%w: %w", err, asynq.SkipRetry)
}
