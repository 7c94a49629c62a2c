package tasks

import (
	"time"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
)

// Rule is a second deduplication key with its own window, e.g. "scan of
// file-123 within 30 s" or "500 EUR to account A within 60 s".
type Rule struct {
	Key    dedup.Key
	Window time.Duration
}

// Job is a task ready for the Producer: the asynq task with its idempotency
// key, fingerprint and dedup policy. Only the catalog builds Jobs (Catalog.
// Build, Typed.Job), so no way in can forget or bend the policy.
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
