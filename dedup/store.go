package dedup

import (
	"context"
	"errors"
	"fmt"
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
	// Claim takes the key for one run. Another fingerprint is a Mismatch only
	// for a done key; a failed record or an expired lease is taken over and
	// the new fingerprint stored, and a live lease answers InProgress.
	// fingerprint "" skips the check. A ctx from WithDelivery makes the claim
	// re-entrant for that delivery (with the same fingerprint).
	Claim(ctx context.Context, key Key, fingerprint string, lease time.Duration) (Claim, error)
	// Extend pushes the lease of each hold to now+lease; the i-th error is
	// nil, ErrLeaseLost or a Redis failure for holds[i].
	Extend(ctx context.Context, lease time.Duration, holds ...Hold) []error
	// Complete marks the key done with result, kept for the store's done TTL
	// unless an option (KeepDoneFor) says otherwise.
	Complete(ctx context.Context, h Hold, result []byte, opts ...CompleteOption) error
	// Release marks the run failed; the next Claim may acquire the key at once.
	Release(ctx context.Context, h Hold, cause string) error
	// Status reads the record; State is StateAbsent when there is none.
	Status(ctx context.Context, key Key) (Record, error)
	// Forget deletes the record and any window of key.
	Forget(ctx context.Context, key Key) error
	// Reserve takes key's window for holder if it is free (first wins).
	Reserve(ctx context.Context, key Key, window time.Duration, holder string) (Reservation, error)
	// Unreserve frees key's window if holder still holds it, e.g. when the
	// enqueue it guarded failed.
	Unreserve(ctx context.Context, key Key, holder string) error
}

// CompleteOption changes one Store.Complete.
type CompleteOption func(*completion)

type completion struct{ doneTTL time.Duration }

// KeepDoneFor keeps the done record, and so the duplicates it answers, for
// ttl instead of the store's DoneTTL: a task type whose repeats stop being
// duplicates sooner or later than the rest (TypeOptions.DoneTTL). 0 keeps
// the store's DoneTTL.
func KeepDoneFor(ttl time.Duration) CompleteOption {
	return func(c *completion) { c.doneTTL = ttl }
}

// doneTTL is the done TTL opts ask for, def when none does.
func doneTTL(def time.Duration, opts []CompleteOption) (time.Duration, error) {
	c := completion{}
	for _, o := range opts {
		o(&c)
	}
	switch {
	case c.doneTTL == 0:
		return def, nil
	case c.doneTTL < time.Millisecond:
		return 0, fmt.Errorf("done TTL %v below 1ms", c.doneTTL)
	}
	return c.doneTTL, nil
}

// ClaimOutcome says what Claim decided.
type ClaimOutcome int

const (
	// Acquired: the caller holds the key and must Complete or Release it.
	Acquired ClaimOutcome = iota + 1
	// Duplicate: the job is done; Result and CompletedAt are set.
	Duplicate
	// InProgress: another holder's lease runs until LeaseUntil.
	InProgress
	// Mismatch: the key is done with another payload (Fingerprint is the stored one).
	Mismatch
)

func (o ClaimOutcome) String() string {
	switch o {
	case Acquired:
		return "acquired"
	case Duplicate:
		return "duplicate"
	case InProgress:
		return "in_progress"
	case Mismatch:
		return "mismatch"
	}
	return "unknown"
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
	Outcome     ClaimOutcome
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
	Fingerprint string // Mismatch: the stored fingerprint
}

// State of an idempotency record.
type State string

const (
	StateAbsent  State = "absent"
	StateRunning State = "running"
	StateDone    State = "done"
	StateFailed  State = "failed"
)

// Record is what Status reports about a key.
type Record struct {
	Key         Key
	State       State
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
}

// Reservation is the result of Store.Reserve.
type Reservation struct {
	Reserved bool
	// Holder and RetryAfter describe the window that blocked the caller.
	Holder     string
	RetryAfter time.Duration
}

type deliveryKey struct{}

// WithDelivery returns a context whose claims are made by one delivery of a
// job, named id: an asynq task id plus this process's boot id (the middleware
// does this), or an API request's principal + key + fingerprint. A claim by
// the same delivery whose reply was lost (network cut, timeout) is taken again
// at once, with a fresh token, instead of waiting out the lease; any other
// delivery still sees InProgress. id must be unique to one delivery: two live
// runs sharing it would both hold the key. It must not contain '|'.
func WithDelivery(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, deliveryKey{}, id)
}

// DeliveryFromContext returns the delivery set by WithDelivery.
func DeliveryFromContext(ctx context.Context) (string, bool) {
	id, ok := ctx.Value(deliveryKey{}).(string)
	return id, ok && id != ""
}
