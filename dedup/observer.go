package dedup

import (
	"context"

	"github.com/onceq/onceq/dedup/internal/storerule"
)

// Operations and outcomes an Event names; they are the words logs and
// metrics carry. A Store's are storerule's, which every Store shares.
const (
	opClaim    = storerule.OpClaim
	opExtend   = storerule.OpExtend
	opComplete = storerule.OpComplete
	opRelease  = storerule.OpRelease
	opReserve  = storerule.OpReserve
	opEnqueue  = "enqueue"
	opRecover  = "recover"
	opJoin     = "join"
	// A worker's write of its own liveness key (server.go).
	opLiveness = "liveness"

	outcomeClaimed    = storerule.OutcomeClaimed
	outcomeDuplicate  = storerule.OutcomeDuplicate
	outcomeInProgress = storerule.OutcomeInProgress
	outcomeMismatch   = storerule.OutcomeMismatch
	outcomeCompleted  = storerule.OutcomeCompleted
	outcomeReleased   = storerule.OutcomeReleased
	outcomeExtended   = storerule.OutcomeExtended
	outcomeLeaseLost  = storerule.OutcomeLeaseLost
	outcomeReserved   = storerule.OutcomeReserved
	outcomeEnqueued   = "enqueued"
	outcomeThrottled  = storerule.OutcomeThrottled
	outcomeConflict   = "conflict"
	outcomeBadPayload = "bad_payload"
	outcomeError      = storerule.OutcomeError
	// A dead worker's task handed back to asynq by the fast recoverer:
	// its owner's liveness key was gone, or asynq's lease ran out with no
	// claim held.
	outcomeOrphaned     = "orphaned"
	outcomeLeaseExpired = "lease_expired"
	// A part of onceq that cannot run where it was started (the fast
	// recoverer on Redis Cluster): said once, at start-up.
	outcomeOff = "off"
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
