package tasks

import (
	"context"
	"time"
)

// Decision is what the Producer did with a Job.
type Decision string

const (
	Enqueued  Decision = "enqueued"
	Duplicate Decision = "duplicate"
	Throttled Decision = "throttled"
)

// Outcome reports an Enqueue. Expected refusals are outcomes, not errors.
type Outcome struct {
	Decision Decision
	Key      string // the idempotency key, namespace/id
	TaskID   string // Enqueued: the new task; Duplicate: the existing one, if known
	Queue    string
	// Duplicate: the existing task's state ("pending", "active", "completed",
	// "done", ...) and its stored result when it is done.
	State  string
	Result []byte
	// Throttled, or Duplicate by time window: when the key is accepted again.
	RetryAfter time.Duration
	Reason     string
}

// Enqueuer is what handlers that fan out (webhook routing) need of the Producer.
type Enqueuer interface {
	Enqueue(ctx context.Context, j Job) (Outcome, error)
}
