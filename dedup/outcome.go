package dedup

import (
	"time"
)

// Decision is what onceq decided about a job: the Producer's answer to an
// enqueue (Outcome.Decision) and a Store's to a claim (Claim.Outcome), in
// one vocabulary.
type Decision string

const (
	// Enqueued: the job was accepted.
	Enqueued Decision = "enqueued"
	// Acquired: the claim is the caller's; it must Complete or Release it.
	Acquired Decision = "acquired"
	// Duplicate: the same job (same key, same content) was accepted before;
	// for a claim, it is done, and Result and CompletedAt are set.
	Duplicate Decision = "duplicate"
	// InProgress: another holder's lease on the key runs until LeaseUntil.
	InProgress Decision = "in_progress"
	// Conflict: the key was accepted (or, for a claim, is done) with other
	// content: a payment id reused for another charge. Nothing was enqueued
	// or run, and the other job's state and result are not reported.
	Conflict Decision = "conflict"
	// Throttled: a time window or rate rule refused the job; retry after
	// RetryAfter. Never a duplicate: the window's holder is another job.
	Throttled Decision = "throttled"
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
	Result []byte
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
