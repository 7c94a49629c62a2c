package storage

import (
	"context"
	"errors"
	"time"
)

// Errors returned by a Store. Expected outcomes (duplicate, in progress,
// mismatch, window held) are results, not errors.
var (
	// ErrLeaseLost is returned by Extend, Complete and Release when the hold's
	// token is no longer current: the lease expired and another worker claimed
	// the key, or the record was forgotten. Nothing was written.
	ErrLeaseLost = errors.New("dedup: lease lost")

	// ErrResultTooLarge is returned by Complete for a result over the store's
	// MaxResultBytes. Nothing was written; the claim is still held.
	ErrResultTooLarge = errors.New("dedup: result too large")
)

// Store is the idempotency record and window engine. Every method is one
// atomic Redis call (Extend pipelines one call per hold; a Claim that finds a
// running or failed record makes a second).
type Store interface {
	// Claim takes the key for one run. Another fingerprint is a Conflict only
	// for a done key; a failed record or an expired lease is taken over and
	// the new fingerprint stored, and a live lease answers InProgress.
	// fingerprint "" skips the check. delivery names one delivery of the
	// job (the middleware uses the asynq task id and the process's boot id):
	// a claim by the same delivery whose reply was lost is taken again at
	// once, with a fresh token, instead of waiting out the lease, while any
	// other delivery sees InProgress. It must be unique to one delivery and
	// must not contain '|'; "" claims as the store's Owner, never re-entrant.
	Claim(ctx context.Context, key Key, fingerprint string, lease time.Duration, delivery string) (Claim, error)
	// Extend pushes the lease of each hold to now+lease; the i-th error is
	// nil, ErrLeaseLost or a Redis failure for holds[i].
	Extend(ctx context.Context, lease time.Duration, holds ...Hold) []error
	// Complete marks the key done with result, kept for doneTTL (0: the
	// store's DoneTTL) so later deliveries are answered as duplicates.
	Complete(ctx context.Context, h Hold, result []byte, doneTTL time.Duration) error
	// Release marks the run failed; the next Claim may acquire the key at once.
	Release(ctx context.Context, h Hold, cause string) error
	// Status reads the record; State is StatusUnknown when there is none.
	Status(ctx context.Context, key Key) (Record, error)
	// Forget deletes the record and any window of key.
	Forget(ctx context.Context, key Key) error
	// Reserve takes key's window for holder if it is free (first wins).
	Reserve(ctx context.Context, key Key, window time.Duration, holder string) (Reservation, error)
	// Unreserve frees key's window if holder still holds it, e.g. when the
	// enqueue it guarded failed.
	Unreserve(ctx context.Context, key Key, holder string) error
}

// Hold is the right to finish one run of a key. Token is a fencing token: it
// grows with every acquisition, and only the current one may write. Owner is
// who claimed it (the delivery, or the store's Owner); token and owner
// together must match the record, so a hold is unique even across clocks.
type Hold struct {
	Key   Key
	Token int64
	Owner string
}

// Claim is the result of Store.Claim.
type Claim struct {
	Outcome     Decision
	Hold        Hold      // Acquired
	Attempt     int       // Acquired: 1 for the first run of this record
	Result      []byte    // Duplicate
	CompletedAt time.Time // Duplicate
	// LeaseUntil (Acquired, InProgress) is this process's clock when the
	// reply came plus the lease, or what Redis's PTTL said was left of it:
	// the lease runs on Redis's clock and may end earlier by the call's
	// latency.
	LeaseUntil  time.Time
	Owner       string // InProgress: who holds the lease
	Fingerprint string // Conflict: the stored fingerprint
	// Compact (Duplicate, Conflict): only the key's compact mark remembers
	// it, its result TTL over: no Result, no Fingerprint.
	Compact bool
}

// Record is what Status reports about a key.
type Record struct {
	Key         Key
	State       Status // unknown (no record), running, done or failed
	Fingerprint string
	Attempts    int
	Token       int64
	Owner       string
	Result      []byte
	Error       string    // a failed record's Release cause; the next claim drops it
	FirstSeen   time.Time // first claim of this record
	UpdatedAt   time.Time
	CompletedAt time.Time
	LeaseUntil  time.Time
	ExpiresIn   time.Duration // time to live left in Redis
	// Compact: done, and remembered by its compact mark alone (its result
	// TTL is over): no result, fingerprint, attempts or owner.
	Compact bool
}

// Reservation is the result of Store.Reserve.
type Reservation struct {
	Reserved bool
	// Holder and RetryAfter describe the window that blocked the caller.
	Holder     string
	RetryAfter time.Duration
}
