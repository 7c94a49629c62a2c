package dedup

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/hibiken/asynq"
)

var (
	// errInProgress: another worker holds a live lease on the task's key. The
	// middleware returns an *inProgressError; wire isFailure and retryDelay
	// into asynq.Config so it is retried after the lease, not counted as a failure.
	errInProgress = errors.New("onceq: in progress")
	// ErrConflict: the task's key was claimed with a different payload. The
	// middleware wraps it with asynq.SkipRetry: retrying cannot help.
	ErrConflict = errors.New("onceq: key reused with a different payload")
)

// inProgressError says when the live lease on Key ends.
type inProgressError struct {
	Key   Key
	Until time.Time
	Owner string
}

func (e *inProgressError) Error() string {
	return fmt.Sprintf("onceq: %q in progress on %s until %s", e.Key.String(), e.Owner, e.Until.UTC().Format(time.RFC3339))
}

func (e *inProgressError) Is(target error) bool { return target == errInProgress }

// isFailure is asynq.Config.isFailure for onceq: waiting for another
// worker's lease is not a failure and does not use up a retry.
func isFailure(err error) bool {
	return err != nil && !errors.Is(err, errInProgress)
}

// retryDelay wraps asynq's retry delay: a task blocked by a live lease comes
// back after a quarter of the remaining lease (at least 1 s, at most just past
// its end), plus jitter so a crowd of duplicates does not return at once. The
// holder usually finishes well before its lease ends, and a waiting retry is
// not counted as a failure, so polling costs one claim per return. Other
// errors use next, or asynq's default.
func retryDelay(next asynq.RetryDelayFunc) asynq.RetryDelayFunc {
	if next == nil {
		next = asynq.DefaultRetryDelayFunc
	}
	return func(n int, err error, t *asynq.Task) time.Duration {
		var ip *inProgressError
		if errors.As(err, &ip) {
			left := max(time.Until(ip.Until), 0)
			d := min(max(left/4, time.Second), left+time.Second)
			return d + rand.N(d/4+1)
		}
		return next(n, err, t)
	}
}
