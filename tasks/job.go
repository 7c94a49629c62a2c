package tasks

import (
	"time"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
)

// Rule is a time window or rate rule: a key with its own window, taken at
// first acceptance, e.g. "scan of file-123 within 30 s" or "500 EUR to
// account A within 60 s". A job refused by a rule is Throttled, never a
// Duplicate: the rule's holder is another job the caller may not read.
type Rule struct {
	Key    dedup.Key
	Window time.Duration
	// Repeats: a repeat of the job that holds the rule is throttled too (an
	// identical scan within the scan window). Otherwise it falls through to
	// the job's own key: duplicate or conflict.
	Repeats bool
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
	// Rules are the job's windows and rate rules, taken in order.
	Rules []*Rule
	// MaxRetry for asynq; 0 means asynq's default (25).
	MaxRetry int
	// Repeat is what a repeat of Key gets before the job starts.
	Repeat Repeat
	// KeepFailed: a job that failed for good keeps blocking Key for the
	// unique window, instead of letting a repeat start a new incarnation.
	KeepFailed bool
}
