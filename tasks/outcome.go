package tasks

import (
	"context"
	"time"
)

// Decision is what the Producer did with a Job.
type Decision string

const (
	// Enqueued: the job was accepted.
	Enqueued Decision = "enqueued"
	// Duplicate: the same job (same key, same content) was accepted before.
	Duplicate Decision = "duplicate"
	// Conflict: the key was accepted before with other content (a payment
	// id reused for another charge). Nothing was enqueued, and the other
	// job's state and result are not reported.
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
}

// Enqueuer is what handlers that fan out (webhook routing) need of the Producer.
type Enqueuer interface {
	Enqueue(ctx context.Context, j Job) (Outcome, error)
}
