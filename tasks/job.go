package tasks

import (
	"time"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
)

// DefaultUniqueWindow is how long an accepted key is refused again. Default: 24h.
const DefaultUniqueWindow = 24 * time.Hour

// Rule is a second deduplication key with its own window, e.g. "scan of
// file-123 within 30 s" or "500 EUR to account A within 60 s".
type Rule struct {
	Key    dedup.Key
	Window time.Duration
}

// Job is a task ready for the Producer: the asynq task with its idempotency
// key, fingerprint and dedup policy. Constructors in this package build Jobs,
// so no producer can forget the policy.
type Job struct {
	Task        *asynq.Task
	Key         dedup.Key
	Fingerprint string
	Queue       string
	// Unique refuses Key again for this long after first acceptance, through
	// the asynq TaskID with Retention = Unique (no extra round trip).
	Unique time.Duration
	// Window refuses a repeat of its key as a duplicate within its window.
	Window *Rule
	// Rate refuses a repeat of its key as throttled (retry after) within its window.
	Rate *Rule
	// MaxRetry for asynq; 0 means asynq's default (25).
	MaxRetry int
}
