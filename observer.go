package onceq

import "context"

// Operations and outcomes an Event names; they are the words logs and
// metrics carry.
const (
	opClaim    = "claim"
	opExtend   = "extend"
	opComplete = "complete"
	opRelease  = "release"
	opReserve  = "reserve"
	opEnqueue  = "enqueue"

	outcomeClaimed    = "claimed"
	outcomeDuplicate  = "duplicate"
	outcomeInProgress = "in_progress"
	outcomeMismatch   = "mismatch"
	outcomeCompleted  = "completed"
	outcomeReleased   = "released"
	outcomeExtended   = "extended"
	outcomeLeaseLost  = "lease_lost"
	outcomeReserved   = "reserved"
	outcomeEnqueued   = "enqueued"
	outcomeThrottled  = "throttled"
	outcomeConflict   = "conflict"
	outcomeBadPayload = "bad_payload"
	outcomeError      = "error"
)

// Event is one deduplication decision, handed to the Observer.
type Event struct {
	// Op is the operation: claim, extend, complete, release, reserve or
	// enqueue.
	Op  string
	Key Key
	// Outcome is what it decided: claimed, duplicate, in_progress,
	// mismatch (a done key claimed with other content), completed,
	// released, extended, lease_lost, reserved, enqueued, throttled,
	// conflict (a key enqueued again with other content), bad_payload or
	// error.
	Outcome string
	Token   int64  // the hold's token, where there is one
	Reason  string // why a job was stopped or delayed; the error for "error"
}

// Observer sees every decision of a Store, the Middleware and the Producer,
// synchronously: keep it cheap. Logging and metrics hang here.
type Observer func(ctx context.Context, e Event)
