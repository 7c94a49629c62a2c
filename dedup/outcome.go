package dedup

import (
	"time"
)

// Outcome reports an Enqueue. Expected refusals are outcomes, not errors.
type Outcome struct {
	Decision Decision
	Key      string // the idempotency key, namespace/id
	TaskID   string // Enqueued: the new task; Duplicate, Conflict: the existing one
	Queue    string
	// Enqueued: the new task's status; Duplicate: the existing job's.
	State Status
	// Duplicate of a done job: its stored result.
	Result Result
	// Throttled: when the job would be accepted.
	RetryAfter time.Duration
	// Incarnation of the key this job is (Enqueued) or met (Duplicate): 1,
	// or more after earlier jobs of the key failed for good.
	Incarnation int
	// Replaced (Enqueued): the job took the place of one of its key that
	// had not started (the replace or debounce policy), which never runs.
	Replaced bool
	Reason   string

	met map[string]string // Duplicate, Conflict: the headers of the task met, for Trace
}
