package storage

import "context"

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
	// pgledger.StatusOutbox, "outbox": committed in the application's
	// transaction, not yet moved into asynq by a relay.
)

// Event is one deduplication decision, handed to the Observer.
type Event struct {
	// Op is the operation: claim, extend, complete, release, reserve,
	// enqueue, recover, join or liveness (a worker's write of its
	// liveness key).
	Op  string
	Key Key
	// Outcome is what it decided: claimed, duplicate, in_progress,
	// mismatch (a done key claimed with other content), completed,
	// released, extended, lease_lost, reserved, enqueued, throttled,
	// conflict (a key enqueued again with other content), bad_payload,
	// orphaned or lease_expired (a dead worker's task recovered), off (a
	// part that cannot run in this setup, said once at start-up) or error.
	Outcome string
	Token   int64  // the hold's token, where there is one
	Reason  string // why a job was stopped or delayed; the error for "error"
}

// Observer sees every decision of a Store, the Middleware and the Producer,
// synchronously: keep it cheap. Logging and metrics hang here.
type Observer func(ctx context.Context, e Event)
