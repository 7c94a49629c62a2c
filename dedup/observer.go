package dedup

import (
	"github.com/onceq/onceq/dedup/internal/storerule"
	"github.com/onceq/onceq/dedup/storage"
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
	// A key's successor started by a worker's sweep (Repeat "successor").
	opSuccessor = "successor"
	// A worker's write of its own liveness key (server.go).
	opLiveness = "liveness"
	// An operator's reset of a key and purge of a type (reset.go).
	opReset = "reset"
	opPurge = "purge"

	outcomeClaimed    = storerule.OutcomeClaimed
	outcomeDuplicate  = storerule.OutcomeDuplicate
	outcomeInProgress = storerule.OutcomeInProgress
	outcomeMismatch   = storerule.OutcomeMismatch
	outcomeCompleted  = storerule.OutcomeCompleted
	outcomeReleased   = storerule.OutcomeReleased
	outcomeExtended   = storerule.OutcomeExtended
	outcomeLeaseLost  = storerule.OutcomeLeaseLost
	outcomeReserved   = storerule.OutcomeReserved
	outcomeEnqueued   = Enqueued
	outcomeThrottled  = storerule.OutcomeThrottled
	outcomeConflict   = Conflict
	outcomeBadPayload = storage.BadPayload
	outcomeError      = storerule.OutcomeError
	outcomeReset      = storage.Reset
	// A dead worker's task handed back to asynq by the fast recoverer:
	// its owner's liveness key was gone, or asynq's lease ran out with no
	// claim held.
	outcomeOrphaned     = storage.Orphaned
	outcomeLeaseExpired = storage.LeaseExpired
	// A part of onceq that cannot run where it was started (the fast
	// recoverer on Redis Cluster): said once, at start-up.
	outcomeOff = storage.Off
	// A successor that started as its key's next incarnation.
	outcomeStarted = "started"
)
