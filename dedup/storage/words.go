package storage

import "context"

// Decision is what the library decided about a job, in one vocabulary: the
// Producer's answer to an enqueue (Outcome.Decision), a Store's to a claim
// (Claim.Outcome), and every Event's outcome, which logs and metrics carry.
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

	// What an Event reports beyond those.

	// Completed: a run's completion was recorded.
	Completed Decision = "completed"
	// Released: a run failed and its claim was given up; the next claims.
	Released Decision = "released"
	// Extended: a lease was pushed on (the heartbeat).
	Extended Decision = "extended"
	// LeaseLost: a hold's token was no longer current; nothing was written.
	LeaseLost Decision = "lease_lost"
	// Reserved: a window was taken for its holder.
	Reserved Decision = "reserved"
	// BadPayload: a task yields no key (not the JSON its type takes).
	BadPayload Decision = "bad_payload"
	// Orphaned: a dead worker's task went back to asynq.
	Orphaned Decision = "orphaned"
	// LeaseExpired: an active task went back to asynq after its lease ran
	// out with no run holding it.
	LeaseExpired Decision = "lease_expired"
	// Reset: an operator freed a key (Producer.Reset) or a type's keys
	// (Producer.Purge); the Event's Reason says what went.
	Reset Decision = "reset"
	// Off: a part that cannot run in this setup, said once at start-up.
	Off Decision = "off"
	// Errored: the operation failed; the Event's Reason is the error.
	Errored Decision = "error"
)

// Status is where a job is, in the one vocabulary the Producer, the CLI,
// GET /v1/jobs and the docs share.
type Status string

const (
	StatusPending   Status = "pending"   // waiting in its queue
	StatusScheduled Status = "scheduled" // waiting for its process-at time
	StatusRunning   Status = "running"   // a worker holds it
	StatusRetry     Status = "retry"     // failed, waiting for the next attempt
	StatusDone      Status = "done"      // its effect is recorded; the result is kept
	StatusFailed    Status = "failed"    // the last run failed and no task is left to retry
	StatusArchived  Status = "archived"  // asynq gave up (retries spent or not retryable)
	StatusUnknown   Status = "unknown"   // nothing is known (never seen, or expired)
	StatusWaiting   Status = "waiting"   // the successor of its key's running job: starts when that run ends
	// pgledger.StatusOutbox, "outbox": committed in the application's
	// transaction, not yet moved into asynq by a relay.
)

// Event is one deduplication decision, handed to the Observer.
type Event struct {
	// Op is the operation: claim, extend, complete, release, reserve,
	// enqueue, recover, join, liveness (a worker's write of its
	// liveness key), reset or purge.
	Op  string
	Key Key
	// Outcome is what it decided, a Decision.
	Outcome Decision
	Token   int64  // the hold's token, where there is one
	Reason  string // why a job was stopped or delayed; the error for "error"
}

// Observer sees every decision of a Store, the Middleware and the Producer,
// synchronously: keep it cheap. Logging and metrics hang here.
type Observer func(ctx context.Context, e Event)
