package dedup

import (
	"context"
	"errors"
	"fmt"

	"github.com/hibiken/asynq"
)

// Handle binds fn to t's type. The handler it returns decodes the payload
// strictly into P, runs the Spec's Prepare and Validate as the producer
// did, calls fn, and records fn's result, as JSON, for duplicates to
// replay. Mount it behind the Middleware (a Server does that); fn reads
// the key to pass downstream from RunFromContext. Outside the middleware
// Handle puts the run in ctx itself, by the same key rule. A payload that
// does not decode or validate, or an error of fn that wraps ErrInvalid,
// skips asynq's retries: retrying cannot help.
func Handle[P, R any](t *Typed[P], fn func(ctx context.Context, p P) (R, error)) asynq.Handler {
	opts := t.Kind.options()
	return asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		if _, ok := RunFromContext(ctx); !ok {
			r, err := runOf(ctx, task, opts)
			if err != nil {
				return permanent(fmt.Errorf("onceq: %s: %w: %w", task.Type(), ErrInvalid, err))
			}
			ctx = withRun(ctx, r)
		}
		var p P
		if err := decode(task.Payload(), &p); err != nil {
			return permanent(fmt.Errorf("onceq: %s: decode payload: %w", task.Type(), err))
		}
		if t.spec.Prepare != nil {
			t.spec.Prepare(&p)
		}
		if err := t.validate(p); err != nil {
			return permanent(err)
		}
		res, err := fn(ctx, p)
		if err != nil {
			if errors.Is(err, ErrInvalid) {
				return permanent(err)
			}
			return err
		}
		b, err := marshal(res)
		if err != nil {
			return fmt.Errorf("onceq: %s: result: %w", task.Type(), err)
		}
		SetResult(ctx, b)
		return nil
	})
}

// permanent marks err as one asynq must not retry.
func permanent(err error) error {
	if errors.Is(err, asynq.SkipRetry) {
		return err
	}
	return fmt.Errorf("%w: %w", err, asynq.SkipRetry)
}
