// Package storerule holds what every onceq Store shares besides the
// interface: the option defaults and their checks, the limits the contract
// puts on fields and durations, fencing tokens and the words a Store's
// events carry. onceq's RedisStore and oncetest's in-memory Store both read
// them here, so the two cannot drift apart.
package storerule

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/onceq/onceq/dedup/storage"
)

// Options are the StoreOptions a Store applies defaults to and checks
// (the Observer aside, which only the root package knows).
type Options struct {
	DoneTTL        time.Duration
	ResultTTL      time.Duration
	FailedTTL      time.Duration
	MaxResultBytes int
	Owner          string
}

// The defaults StoreOptions documents.
const (
	DefaultDoneTTL        = 24 * time.Hour
	DefaultResultTTL      = time.Hour
	DefaultFailedTTL      = time.Hour
	DefaultMaxResultBytes = 64 << 10
)

// WithDefaults fills o's zero fields with the defaults and checks the rest.
func (o Options) WithDefaults() (Options, error) {
	if o.DoneTTL == 0 {
		o.DoneTTL = DefaultDoneTTL
	}
	if o.ResultTTL == 0 {
		o.ResultTTL = DefaultResultTTL
	}
	if o.FailedTTL == 0 {
		o.FailedTTL = DefaultFailedTTL
	}
	if o.MaxResultBytes == 0 {
		o.MaxResultBytes = DefaultMaxResultBytes
	}
	if o.Owner == "" {
		o.Owner = BootOwner
	}
	switch {
	case o.DoneTTL < time.Millisecond:
		return o, errors.New("onceq: DoneTTL must be at least 1ms")
	case o.ResultTTL < time.Millisecond:
		return o, errors.New("onceq: ResultTTL must be at least 1ms")
	case o.FailedTTL < time.Millisecond:
		return o, errors.New("onceq: FailedTTL must be at least 1ms")
	case CheckField("Owner", o.Owner) != nil:
		return o, fmt.Errorf("onceq: %w", CheckField("Owner", o.Owner))
	case o.MaxResultBytes < 0:
		return o, errors.New("onceq: MaxResultBytes must not be negative")
	}
	return o, nil
}

// Sep separates the fields of RedisStore's record. The contract keeps it
// out of fingerprints, deliveries and owners for every Store, so a key
// claimed on one Store is claimable the same way on another.
const Sep = '|'

// CheckField keeps the separator out of a field that is not the record's
// last.
func CheckField(what, s string) error {
	if strings.ContainsRune(s, Sep) {
		return fmt.Errorf("%s %q contains '|'", what, s)
	}
	return nil
}

// AtLeastMS refuses a lease or window below one millisecond, the
// resolution of Redis's TTLs.
func AtLeastMS(what string, d time.Duration) error {
	if d < time.Millisecond {
		return fmt.Errorf("%s %v below 1ms", what, d)
	}
	return nil
}

// DoneTTL is the done TTL a Complete asks for: ttl, or def for 0.
func DoneTTL(def, ttl time.Duration) (time.Duration, error) {
	if ttl == 0 {
		return def, nil
	}
	if err := AtLeastMS("done TTL", ttl); err != nil {
		return 0, err
	}
	return ttl, nil
}

// ResultTTL is the result TTL a Complete asks for: ttl, or def for 0.
func ResultTTL(def, ttl time.Duration) (time.Duration, error) {
	if ttl == 0 {
		return def, nil
	}
	if err := AtLeastMS("result TTL", ttl); err != nil {
		return 0, err
	}
	return ttl, nil
}

// ReasonCompact is what a repeat of a key remembered by its compact mark
// alone hears, and what Status says of it.
const ReasonCompact = "done; result no longer kept"

// Mismatch reports whether a claim with fingerprint fp differs from the
// stored one; "" on either side skips the check.
func Mismatch(stored, fp string) bool { return fp != "" && stored != "" && stored != fp }

// BootOwner names this process start: host/pid plus a random boot id, so a
// restarted container with the same pid and hostname is someone else.
var BootOwner = func() string {
	host, _ := os.Hostname()
	var b [6]byte
	_, _ = rand.Read(b[:])
	return strings.ReplaceAll(fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b[:])), "|", "_")
}()

var lastToken atomic.Int64

// NextToken is the token a fresh record starts with: the worker's clock in
// µs, strictly increasing within the process. Claims on an existing record
// take max(stored+1, this). See onceq's doc.go for what clock skew can do.
func NextToken() int64 {
	for {
		last := lastToken.Load()
		t := max(time.Now().UnixMicro(), last+1)
		if lastToken.CompareAndSwap(last, t) {
			return t
		}
	}
}

// The operations and outcomes a Store's events name (dedup.Event): the
// words logs and metrics carry.
const (
	OpClaim    = "claim"
	OpExtend   = "extend"
	OpComplete = "complete"
	OpRelease  = "release"
	OpReserve  = "reserve"

	OutcomeClaimed    = storage.Acquired
	OutcomeDuplicate  = storage.Duplicate
	OutcomeInProgress = storage.InProgress
	OutcomeMismatch   = storage.Conflict
	OutcomeCompleted  = storage.Completed
	OutcomeReleased   = storage.Released
	OutcomeExtended   = storage.Extended
	OutcomeLeaseLost  = storage.LeaseLost
	OutcomeReserved   = storage.Reserved
	OutcomeThrottled  = storage.Throttled
	OutcomeError      = storage.Errored
)

// The reasons a Store's events give for stopping or delaying a job.
const (
	ReasonStale      = "token no longer current"
	ReasonSameHolder = "already held by this holder"
)

// ReasonDuplicate is a duplicate's reason: when the job was done.
func ReasonDuplicate(completed time.Time) string {
	return "done at " + completed.UTC().Format(time.RFC3339Nano)
}

// ReasonInProgress is an in-progress claim's reason: whose lease, until when.
func ReasonInProgress(owner string, until time.Time) string {
	return fmt.Sprintf("lease held by %s until %s", owner, until.UTC().Format(time.RFC3339Nano))
}

// ReasonMismatch is a mismatch's reason: the fingerprint the done record holds.
func ReasonMismatch(stored string) string { return "stored fingerprint " + stored }

// ReasonThrottled is a refused reservation's reason: whose window, for how long.
func ReasonThrottled(holder string, left time.Duration) string {
	return fmt.Sprintf("window held by %s for %s", holder, left)
}
