package dedup

import "context"

// Op is the engine operation that made a Decision.
type Op string

const (
	OpClaim    Op = "claim"
	OpExtend   Op = "extend"
	OpComplete Op = "complete"
	OpRelease  Op = "release"
	OpReserve  Op = "reserve"
	OpEnqueue  Op = "enqueue"
)

// Outcome names a deduplication decision, as logged and counted.
type Outcome string

const (
	OutcomeClaimed    Outcome = "claimed"
	OutcomeDuplicate  Outcome = "duplicate"
	OutcomeInProgress Outcome = "in_progress"
	OutcomeMismatch   Outcome = "mismatch"
	OutcomeCompleted  Outcome = "completed"
	OutcomeReleased   Outcome = "released"
	OutcomeExtended   Outcome = "extended"
	OutcomeLeaseLost  Outcome = "lease_lost"
	OutcomeReserved   Outcome = "reserved"
	OutcomeEnqueued   Outcome = "enqueued"
	OutcomeThrottled  Outcome = "throttled"
	// OutcomeConflict: a key already accepted with another fingerprint was
	// enqueued again (a payment id reused for another charge).
	OutcomeConflict   Outcome = "conflict"
	OutcomeBadPayload Outcome = "bad_payload"
	OutcomeError      Outcome = "error"
)

// Blocks reports whether the outcome stops or delays a job; those are the
// decisions worth an info log line, the rest are the hot path.
func (o Outcome) Blocks() bool {
	switch o {
	case OutcomeDuplicate, OutcomeInProgress, OutcomeMismatch, OutcomeLeaseLost, OutcomeThrottled, OutcomeConflict, OutcomeBadPayload:
		return true
	}
	return false
}

// Decision is one engine decision, handed to the Observer.
type Decision struct {
	Op      Op
	Key     Key
	Outcome Outcome
	Token   int64  // the hold's token, where there is one
	Reason  string // why a job was stopped or delayed; the error for OutcomeError
}

// Observer sees every decision of a Store, synchronously: keep it cheap.
// Logging and metrics hang here without touching the engine.
type Observer func(ctx context.Context, d Decision)
