package linearize

import (
	"math"

	"github.com/anishathalye/porcupine"

	"github.com/onceq/onceq/dedup"
)

// Never is the return time, in ms, of an operation whose outcome is unknown,
// and the open upper end of a lease nobody has seen.
const Never = math.MaxInt64

// Slack is how far, in ms, Redis's clock may stray from the recording
// process's clock across one operation: both read the same host clock, but at
// slightly different moments and in different units.
const Slack = 2

// Kind names an operation on the record.
type Kind uint8

const (
	Claim Kind = iota + 1
	Extend
	Complete
	Release
	Status
)

func (k Kind) String() string {
	return [...]string{"?", "claim", "extend", "complete", "release", "status"}[k]
}

// Input is one operation as called: its kind, key and arguments, and the
// caller's clock at the call.
type Input struct {
	Kind        Kind
	Key         string
	Fingerprint string // Claim
	LeaseMs     int64  // Claim, Extend
	Owner       string // Claim: the store's owner name
	Delivery    string // Claim: the delivery identity (see Rules.Reentrant)
	Token       int64  // Extend, Complete, Release
	Value       string // Complete: the result; Release: the cause
	CallMs      int64
}

// Output is what an operation returned, and the caller's clock at the return.
// Unknown outcomes (timeouts, lost replies, Redis gone) have Unknown set and
// RetMs Never: the operation may or may not have taken effect.
type Output struct {
	Unknown bool
	RetMs   int64

	// Claim
	Outcome     dedup.Decision
	Token       int64
	Attempt     int
	LeaseUntil  int64 // ms; also Status
	Owner       string
	Result      string
	Fingerprint string

	// Extend, Complete, Release: the token was not current.
	LeaseLost bool

	// Status
	Record Snapshot
}

// Snapshot is the part of a storage.Record the model predicts.
type Snapshot struct {
	State       dedup.Status
	Fingerprint string
	Attempts    int
	Token       int64
	Owner       string
	Result      string
	Error       string
	LeaseUntil  int64 // ms, 0 when the record has no lease
}

// Rules switch parts of the sequential specification.
type Rules struct {
	// Reentrant: a Claim from the delivery that holds the running record
	// takes it again at once with a fresh token, whatever its lease; other
	// deliveries still see InProgress. The re-take keeps the Attempt while
	// the lease runs and counts one more after it (claim.lua).
	Reentrant bool
}

// state is one idempotency record as the sequential specification sees it.
// Values the history cannot pin down are ranges: a token set by a claim whose
// reply was lost is 0 (unknown, above floor), a lease nobody read is
// [luLo, luHi].
type state struct {
	st         dedup.Status
	fp         string
	att        int
	tok, floor int64 // floor: every later token must exceed it
	owner, dlv string
	result     string
	cause      string
	luLo, luHi int64
}

var absent = state{st: dedup.StatusUnknown}

// Model returns the sequential specification of one idempotency record per
// key, as porcupine wants it.
func Model(r Rules) porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition: byKey,
		Init:      func() []any { return []any{absent} },
		Step: func(s, in, out any) []any {
			return r.step(s.(state), in.(Input), out.(Output))
		},
		Equal:             func(a, b any) bool { return a.(state) == b.(state) },
		DescribeOperation: func(in, out any) string { return describe(in.(Input), out.(Output)) },
		DescribeState:     func(s any) string { return s.(state).String() },
	}
	return nm.ToModel()
}

func byKey(ops []porcupine.Operation) [][]porcupine.Operation {
	idx := map[string]int{}
	var parts [][]porcupine.Operation
	for _, op := range ops {
		k := op.Input.(Input).Key
		i, ok := idx[k]
		if !ok {
			i = len(parts)
			idx[k] = i
			parts = append(parts, nil)
		}
		parts[i] = append(parts[i], op)
	}
	return parts
}

// step returns every state the record may be in after the operation, or
// none if the output is impossible from s. An unknown outcome is the
// operation either not applied or applied with whatever result.
func (r Rules) step(s state, in Input, out Output) []any {
	if out.Unknown {
		next := []any{s}
		if a, ok := r.applyUnknown(s, in); ok {
			next = append(next, a)
			if in.Kind == Claim && r.reenters(s, in) {
				a.att = s.att // a re-take may keep the attempt number
				next = append(next, a)
			}
		}
		return next
	}
	var n state
	var ok bool
	switch in.Kind {
	case Claim:
		n, ok = r.claim(s, in, out)
	case Extend:
		n, ok = fenced(s, in, out, func(n state) state {
			return n.extended(in.CallMs-Slack+in.LeaseMs, out.RetMs+Slack+in.LeaseMs)
		})
	case Complete:
		n, ok = fenced(s, in, out, func(n state) state { return n.done(in.Value) })
	case Release:
		n, ok = fenced(s, in, out, func(n state) state { return n.failed(in.Value) })
	case Status:
		n, ok = status(s, in, out)
	}
	if !ok {
		return nil
	}
	return []any{n}
}

// holds reports whether token is the record's current one. A token set by a
// claim whose reply was lost is held by nobody.
func (s state) holds(token int64) bool {
	return s.st == dedup.StatusRunning && s.tok != 0 && s.tok == token
}

// fenced is Extend, Complete and Release: applied for the current token,
// ErrLeaseLost and nothing written for any other.
func fenced(s state, in Input, out Output, apply func(state) state) (state, bool) {
	if !s.holds(in.Token) {
		return s, out.LeaseLost
	}
	if out.LeaseLost {
		return s, false
	}
	return apply(s), true
}

// The writes of extend.lua, complete.lua and release.lua.
func (s state) extended(lo, hi int64) state { s.luLo, s.luHi = lo, hi; return s }

func (s state) done(result string) state {
	s.st, s.result, s.cause, s.luLo, s.luHi = dedup.StatusDone, result, "", 0, 0
	return s
}

func (s state) failed(cause string) state {
	s.st, s.cause, s.luLo, s.luHi = dedup.StatusFailed, cause, 0, 0
	return s
}

// other reports a claim with another non-empty fingerprint than the record's.
func (s state) other(fp string) bool {
	return s.st != dedup.StatusUnknown && fp != "" && s.fp != "" && s.fp != fp
}

// mismatch is claim.lua's refusal: another fingerprint against a done
// record. A failed record or an expired lease is taken over by it, a live
// lease makes it wait.
func (s state) mismatch(fp string) bool { return s.st == dedup.StatusDone && s.other(fp) }

func (r Rules) claim(s state, in Input, out Output) (state, bool) {
	switch {
	case s.mismatch(in.Fingerprint):
		return s, out.Outcome == dedup.Conflict && out.Fingerprint == s.fp
	case s.st == dedup.StatusDone:
		return s, out.Outcome == dedup.Duplicate && out.Result == s.result
	}
	if out.Outcome == dedup.InProgress {
		// Live at Redis's "now", which lies within the call.
		if s.st != dedup.StatusRunning || r.reenters(s, in) || out.Owner != s.owner {
			return s, false
		}
		return s.readLease(in, out, out.LeaseUntil, in.CallMs-Slack)
	}
	if out.Outcome != dedup.Acquired {
		return s, false
	}
	// Redis granted the lease at some now within the call, on its clock; the
	// store reports the lease end as its own clock after the reply plus the
	// lease, so now is at or before LeaseUntil - lease.
	lo, hi := in.CallMs-Slack, min(out.RetMs, out.LeaseUntil-in.LeaseMs)+Slack
	if out.LeaseUntil-in.LeaseMs < lo || out.Token <= s.floor || out.Token < (in.CallMs-Slack)*1000 {
		return s, false
	}
	att := out.Attempt
	switch {
	case r.reenters(s, in) && att == s.att:
		hi = min(hi, s.luHi) // a re-take keeps the attempt while the lease runs
	case att != s.att+1:
		return s, false
	case s.st == dedup.StatusRunning:
		lo = max(lo, s.luLo) // a takeover, or a re-take after the lease ended
	}
	if lo > hi {
		return s, false // granted outside the call, or against the lease
	}
	n := s.acquire(in, att)
	n.tok, n.floor = out.Token, out.Token
	n.luLo, n.luHi = lo+in.LeaseMs, hi+in.LeaseMs
	return n, true
}

// reenters reports whether the claim comes from the delivery holding s,
// with its fingerprint.
func (r Rules) reenters(s state, in Input) bool {
	return r.Reentrant && s.st == dedup.StatusRunning && in.Delivery != "" && in.Delivery == s.dlv &&
		!s.other(in.Fingerprint)
}

// acquire is the write claim.lua makes when it grants the key; the caller
// fills in token and lease. A running record keeps no cause: only a failed
// one has it (the packed record's tail, record.go).
func (s state) acquire(in Input, att int) state {
	if s.st == dedup.StatusUnknown || in.Fingerprint != "" {
		s.fp = in.Fingerprint
	}
	s.st, s.att, s.owner, s.dlv, s.result, s.cause = dedup.StatusRunning, att, in.Owner, in.Delivery, "", ""
	return s
}

// applyUnknown is the state after an operation whose reply was lost took
// effect, if it could change anything.
func (r Rules) applyUnknown(s state, in Input) (state, bool) {
	switch in.Kind {
	case Claim:
		if s.mismatch(in.Fingerprint) || s.st == dedup.StatusDone {
			return s, false
		}
		// Even a live lease may have ended by the time the call ran.
		lo := in.CallMs - Slack
		if s.st == dedup.StatusRunning && !r.reenters(s, in) {
			lo = max(lo, s.luLo)
		}
		n := s.acquire(in, s.att+1)
		n.tok, n.luLo, n.luHi = 0, lo+in.LeaseMs, Never
		return n, true
	case Extend:
		return s.extended(in.CallMs-Slack+in.LeaseMs, Never), s.holds(in.Token)
	case Complete:
		return s.done(in.Value), s.holds(in.Token)
	case Release:
		return s.failed(in.Value), s.holds(in.Token)
	}
	return s, false
}

// status checks a read against s, pinning down what s did not know.
func status(s state, in Input, out Output) (state, bool) {
	got := out.Record
	if s.st == dedup.StatusUnknown {
		return s, got == Snapshot{State: dedup.StatusUnknown}
	}
	if got.State != s.st || got.Fingerprint != s.fp || got.Attempts != s.att || got.Owner != s.owner ||
		got.Result != s.result || got.Error != s.cause {
		return s, false
	}
	if s.tok == 0 {
		if got.Token <= s.floor {
			return s, false
		}
		s.tok, s.floor = got.Token, got.Token
	} else if got.Token != s.tok {
		return s, false
	}
	if s.st != dedup.StatusRunning {
		return s, got.LeaseUntil == 0
	}
	return s.readLease(in, out, got.LeaseUntil, 0)
}

// readLease checks a lease end at that a read of the running record s
// reported, and keeps what it says: the store computes it as the worker's
// clock after the reply plus Redis's PTTL (less the grace), and PTTL was
// read at some Redis now within the call. So at lies at or after the true
// end, by no more than the call took. The lease must also end after after.
func (s state) readLease(in Input, out Output, at, after int64) (state, bool) {
	lo, hi := max(s.luLo, at-(out.RetMs-in.CallMs)-Slack, after+1), min(s.luHi, at+Slack)
	if lo > hi {
		return s, false
	}
	s.luLo, s.luHi = lo, hi
	return s, true
}
