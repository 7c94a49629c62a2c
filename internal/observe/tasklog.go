package observe

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/storage"
)

// TaskLog is an asynq middleware that logs one line per finished run: type,
// key, outcome, attempt, incarnation (of the key: 2 and up after a job
// failed for good; 0 for an unreadable header) and duration, at info when the run succeeded (only
// if every is true: ONCEQ_TASK_LOG) and at warn with the error when it did
// not. A handler that succeeded is logged once the middleware has recorded
// it: a worker fenced out by another (storage.ErrLeaseLost) recorded nothing,
// and says lease_lost. Put it inside the dedup middleware: duplicates never
// run and are logged as decisions instead. Payloads are never logged.
func TaskLog(log *zap.Logger, every bool) asynq.MiddlewareFunc {
	return func(next asynq.Handler) asynq.Handler {
		return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) (err error) {
			start := time.Now()
			outcome := "panic"
			line := func(outcome string, took time.Duration, err error, extra ...zap.Field) {
				lvl := zapcore.WarnLevel
				if outcome == "ok" {
					if !every {
						return
					}
					lvl = zapcore.InfoLevel
				}
				ce := log.Check(lvl, "task finished")
				if ce == nil {
					return
				}
				key, inc := runOf(ctx)
				fields := append([]zap.Field{zap.String("type", t.Type()), zap.String("key", key),
					zap.String("outcome", outcome), zap.Int("attempt", attempt(ctx)), zap.Int("incarnation", inc),
					zap.Duration("duration", took)}, extra...)
				if err != nil {
					fields = append(fields, zap.Error(err))
				}
				ce.Write(fields...)
			}
			defer func() {
				took := time.Since(start)
				if v := recover(); v != nil {
					line(outcome, took, err, zap.String("panic", fmt.Sprint(v)))
					panic(v) // asynq's own recovery turns it into a failure
				}
				if outcome == "ok" && dedup.OnRecorded(ctx, func(rerr error) { line(recorded(rerr), took, rerr) }) {
					return
				}
				line(outcome, took, err)
			}()
			err = next.ProcessTask(ctx, t)
			outcome = runOutcome(err)
			return err
		})
	}
}

// recorded names how recording a run that succeeded went.
func recorded(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, storage.ErrLeaseLost):
		return "lease_lost"
	}
	return "error"
}

// runOf is the key and incarnation the middleware ran the task under;
// outside it (a duplicate never reaches here) there is no key, and the
// incarnation is the first.
func runOf(ctx context.Context) (string, int) {
	if r, ok := dedup.RunFromContext(ctx); ok {
		return r.Key.String(), r.Incarnation
	}
	return "", 1
}

// attempt is 1 for the first run of a task, asynq's retry count plus one.
func attempt(ctx context.Context) int {
	n, _ := asynq.GetRetryCount(ctx)
	return n + 1
}
