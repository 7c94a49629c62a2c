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
	// Throttled: a rate rule refused the job; retry after RetryAfter.
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
	// Throttled, or Duplicate by time window: when the key is accepted again.
	RetryAfter time.Duration
	Reason     string
}

// Enqueuer is what handlers that fan out (webhook routing) need of the Producer.
type Enqueuer interface {
	Enqueue(ctx context.Context, j Job) (Outcome, error)
}
