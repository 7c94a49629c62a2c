package oncetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/internal/storerule"
	"github.com/onceq/onceq/dedup/storage"
)

// Store is an in-memory storage.Store with the Redis store's semantics: the same
// outcomes, fencing, re-entrant claims, TTLs, limits and events, checked by
// the same suite (TestStore). It lives in one process, so it is for tests
// and for trying things out, not for workers that must agree with each
// other. Safe for concurrent use.
type Store struct {
	opts storage.Options
	now  func() time.Time

	mu      sync.Mutex
	records map[string]*record // by Key.String(), as Redis keys are
	windows map[string]window
	writes  int // since the last sweep of expired entries
}

var _ storage.Store = (*Store)(nil)

// record is the Redis store's packed record, with its TTL.
type record struct {
	state     dedup.Status // running, done or failed
	token     int64
	owner     string
	attempts  int
	firstSeen time.Time
	updated   time.Time // done: completed at
	fp        string
	grace     time.Duration // running: how long the record outlives its lease
	tail      string        // done: the result; failed: the cause
	expires   time.Time
}

type window struct {
	holder  string
	expires time.Time
}

// NewStore returns an empty Store on the wall clock. opts get
// dedup.NewRedisStore's defaults and checks.
func NewStore(opts storage.Options) (*Store, error) {
	return NewStoreWithClock(opts, time.Now)
}

// NewStoreWithClock is NewStore on the clock now (nil: time.Now), e.g. a
// Clock's Now: leases, TTLs and windows end when now says so, so a test
// moves time instead of waiting for it. Fencing tokens do not follow now:
// they grow with every acquisition whatever it says.
func NewStoreWithClock(opts storage.Options, now func() time.Time) (*Store, error) {
	// ResultTTL is checked alike; in memory a done record keeps its
	// result for the whole done TTL (no compact mark).
	r, err := storerule.Options{DoneTTL: opts.DoneTTL, ResultTTL: opts.ResultTTL, FailedTTL: opts.FailedTTL,
		MaxResultBytes: opts.MaxResultBytes, Owner: opts.Owner}.WithDefaults()
	if err != nil {
		return nil, err
	}
	opts.DoneTTL, opts.ResultTTL, opts.FailedTTL, opts.MaxResultBytes, opts.Owner = r.DoneTTL, r.ResultTTL, r.FailedTTL, r.MaxResultBytes, r.Owner
	if opts.Observer == nil {
		opts.Observer = func(context.Context, dedup.Event) {}
	}
	if now == nil {
		now = time.Now
	}
	return &Store{opts: opts, now: now, records: map[string]*record{}, windows: map[string]window{}}, nil
}

func (s *Store) observe(ctx context.Context, op string, k dedup.Key, o dedup.Decision, tok int64, reason string) {
	s.opts.Observer(ctx, dedup.Event{Op: op, Key: k, Outcome: o, Token: tok, Reason: reason})
}

// fail is the Redis store's answer to a call that could not be made: here only
// a context that is already done.
func (s *Store) fail(ctx context.Context, op string, k dedup.Key, err error) error {
	s.observe(ctx, op, k, storerule.OutcomeError, 0, err.Error())
	return fmt.Errorf("onceq: %s %q: %w", op, k.String(), err)
}

// ms is t as a record stamps it: to the millisecond, like the Redis store's.
func ms(t time.Time) time.Time { return time.UnixMilli(t.UnixMilli()) }

// Claim implements storage.Store.
func (s *Store) Claim(ctx context.Context, k dedup.Key, fingerprint string, lease time.Duration, delivery string) (storage.Claim, error) {
	if err := storerule.AtLeastMS("lease", lease); err != nil {
		return storage.Claim{}, fmt.Errorf("onceq: claim %q: %w", k.String(), err)
	}
	owner, reentrant := delivery, delivery != ""
	if !reentrant {
		owner = s.opts.Owner
	}
	if err := errors.Join(storerule.CheckField("fingerprint", fingerprint), storerule.CheckField("delivery", owner)); err != nil {
		return storage.Claim{}, fmt.Errorf("onceq: claim %q: %w", k.String(), err)
	}
	if err := ctx.Err(); err != nil {
		return storage.Claim{}, s.fail(ctx, storerule.OpClaim, k, err)
	}
	s.mu.Lock()
	c := s.claim(k, fingerprint, owner, reentrant, lease)
	s.mu.Unlock()
	switch c.Outcome {
	case dedup.Acquired:
		s.observe(ctx, storerule.OpClaim, k, storerule.OutcomeClaimed, c.Hold.Token, "")
	case dedup.Duplicate:
		s.observe(ctx, storerule.OpClaim, k, storerule.OutcomeDuplicate, 0, storerule.ReasonDuplicate(c.CompletedAt))
	case dedup.InProgress:
		s.observe(ctx, storerule.OpClaim, k, storerule.OutcomeInProgress, 0, storerule.ReasonInProgress(c.Owner, c.LeaseUntil))
	case dedup.Conflict:
		s.observe(ctx, storerule.OpClaim, k, storerule.OutcomeMismatch, 0, storerule.ReasonMismatch(c.Fingerprint))
	}
	return c, nil
}

// claim is claim.lua, with the first claim's SET NX folded in.
func (s *Store) claim(k dedup.Key, fp, owner string, reentrant bool, lease time.Duration) storage.Claim {
	now := s.now()
	tok, att, firstSeen := storerule.NextToken(), 1, ms(now)
	if r := s.record(k.String(), now); r != nil {
		if r.state == dedup.StatusDone {
			if storerule.Mismatch(r.fp, fp) {
				return storage.Claim{Outcome: dedup.Conflict, Fingerprint: r.fp}
			}
			return storage.Claim{Outcome: dedup.Duplicate, Result: []byte(r.tail), CompletedAt: r.updated}
		}
		left := r.expires.Sub(now) - r.grace
		live := r.state == dedup.StatusRunning && left > 0
		again := live && !storerule.Mismatch(r.fp, fp) && reentrant && r.owner == owner
		if live && !again {
			return storage.Claim{Outcome: dedup.InProgress, LeaseUntil: now.Add(left), Owner: r.owner}
		}
		tok, att, firstSeen = max(r.token+1, tok), r.attempts, r.firstSeen
		if !again {
			att++
		}
		if fp == "" {
			fp = r.fp
		}
	}
	s.put(k.String(), &record{state: dedup.StatusRunning, token: tok, owner: owner, attempts: att,
		firstSeen: firstSeen, updated: ms(now), fp: fp, grace: s.opts.FailedTTL,
		expires: now.Add(lease + s.opts.FailedTTL)})
	return storage.Claim{Outcome: dedup.Acquired, Hold: storage.Hold{Key: k, Token: tok, Owner: owner},
		Attempt: att, LeaseUntil: now.Add(lease)}
}

// Extend implements storage.Store.
func (s *Store) Extend(ctx context.Context, lease time.Duration, holds ...storage.Hold) []error {
	errs := make([]error, len(holds))
	if len(holds) == 0 {
		return errs
	}
	if err := ctx.Err(); err != nil {
		for i, h := range holds {
			errs[i] = s.fail(ctx, storerule.OpExtend, h.Key, err)
		}
		return errs
	}
	held := make([]bool, len(holds))
	s.mu.Lock()
	now := s.now()
	for i, h := range holds {
		if r := s.held(h, now); r != nil {
			held[i] = true
			if r.expires = now.Add(lease + s.opts.FailedTTL); !now.Before(r.expires) {
				delete(s.records, h.Key.String()) // Redis's PEXPIRE with no time left
			}
		}
	}
	s.mu.Unlock()
	for i, h := range holds {
		if !held[i] {
			s.observe(ctx, storerule.OpExtend, h.Key, storerule.OutcomeLeaseLost, h.Token, storerule.ReasonStale)
			errs[i] = fmt.Errorf("onceq: extend %q: %w", h.Key.String(), storage.ErrLeaseLost)
			continue
		}
		s.observe(ctx, storerule.OpExtend, h.Key, storerule.OutcomeExtended, h.Token, "")
	}
	return errs
}

// Complete implements storage.Store.
func (s *Store) Complete(ctx context.Context, h storage.Hold, result []byte, ttl time.Duration) error {
	if len(result) > s.opts.MaxResultBytes {
		return fmt.Errorf("onceq: complete %q: %d bytes over %d: %w",
			h.Key.String(), len(result), s.opts.MaxResultBytes, storage.ErrResultTooLarge)
	}
	ttl, err := storerule.DoneTTL(s.opts.DoneTTL, ttl)
	if err != nil {
		return fmt.Errorf("onceq: complete %q: %w", h.Key.String(), err)
	}
	return s.finish(ctx, storerule.OpComplete, storerule.OutcomeCompleted, h, dedup.StatusDone, string(result), ttl)
}

// Release implements storage.Store.
func (s *Store) Release(ctx context.Context, h storage.Hold, cause string) error {
	return s.finish(ctx, storerule.OpRelease, storerule.OutcomeReleased, h, dedup.StatusFailed, cause, s.opts.FailedTTL)
}

// finish is finish.lua: it ends the run of h, if h is current, in state
// with tail, kept for ttl.
func (s *Store) finish(ctx context.Context, op string, ok dedup.Decision, h storage.Hold, state dedup.Status, tail string, ttl time.Duration) error {
	if err := ctx.Err(); err != nil {
		return s.fail(ctx, op, h.Key, err)
	}
	s.mu.Lock()
	now := s.now()
	r := s.held(h, now)
	if r != nil {
		r.state, r.tail, r.updated, r.grace, r.expires = state, tail, ms(now), 0, now.Add(ttl)
		s.wrote()
	}
	s.mu.Unlock()
	if r == nil {
		s.observe(ctx, op, h.Key, storerule.OutcomeLeaseLost, h.Token, storerule.ReasonStale)
		return fmt.Errorf("onceq: %s %q: %w", op, h.Key.String(), storage.ErrLeaseLost)
	}
	reason := ""
	if state == dedup.StatusFailed {
		reason = tail // a release's cause
	}
	s.observe(ctx, op, h.Key, ok, h.Token, reason)
	return nil
}

// Status implements storage.Store.
func (s *Store) Status(ctx context.Context, k dedup.Key) (storage.Record, error) {
	if err := ctx.Err(); err != nil {
		return storage.Record{}, fmt.Errorf("onceq: status %q: %w", k.String(), err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	rec := storage.Record{Key: k, State: dedup.StatusUnknown}
	r := s.record(k.String(), now)
	if r == nil {
		return rec, nil
	}
	rec.State, rec.Fingerprint, rec.Attempts, rec.Token, rec.Owner = r.state, r.fp, r.attempts, r.token, r.owner
	rec.FirstSeen, rec.UpdatedAt, rec.ExpiresIn = r.firstSeen, r.updated, r.expires.Sub(now)
	switch r.state {
	case dedup.StatusRunning:
		rec.LeaseUntil = now.Add(rec.ExpiresIn - r.grace)
	case dedup.StatusDone:
		rec.Result, rec.CompletedAt = []byte(r.tail), r.updated
	case dedup.StatusFailed:
		rec.Error = r.tail
	}
	return rec, nil
}

// Forget implements storage.Store.
func (s *Store) Forget(ctx context.Context, k dedup.Key) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("onceq: forget %q: %w", k.String(), err)
	}
	s.mu.Lock()
	delete(s.records, k.String())
	delete(s.windows, k.String())
	s.mu.Unlock()
	return nil
}

// Reserve implements storage.Store.
func (s *Store) Reserve(ctx context.Context, k dedup.Key, win time.Duration, holder string) (storage.Reservation, error) {
	if err := storerule.AtLeastMS("window", win); err != nil {
		return storage.Reservation{}, fmt.Errorf("onceq: reserve %q: %w", k.String(), err)
	}
	if err := ctx.Err(); err != nil {
		return storage.Reservation{}, s.fail(ctx, storerule.OpReserve, k, err)
	}
	s.mu.Lock()
	now := s.now()
	w, held := s.window(k.String(), now)
	if !held {
		s.windows[k.String()] = window{holder: holder, expires: now.Add(win)}
		s.wrote()
	}
	s.mu.Unlock()
	if !held {
		s.observe(ctx, storerule.OpReserve, k, storerule.OutcomeReserved, 0, "")
		return storage.Reservation{Reserved: true}, nil
	}
	r := storage.Reservation{Holder: w.holder, RetryAfter: max(w.expires.Sub(now), 0)}
	if r.Holder == holder {
		// The same job again: its own window does not throttle it.
		s.observe(ctx, storerule.OpReserve, k, storerule.OutcomeReserved, 0, storerule.ReasonSameHolder)
		return r, nil
	}
	s.observe(ctx, storerule.OpReserve, k, storerule.OutcomeThrottled, 0, storerule.ReasonThrottled(r.Holder, r.RetryAfter))
	return r, nil
}

// Unreserve implements storage.Store.
func (s *Store) Unreserve(ctx context.Context, k dedup.Key, holder string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("onceq: unreserve %q: %w", k.String(), err)
	}
	s.mu.Lock()
	if w, held := s.window(k.String(), s.now()); held && w.holder == holder {
		delete(s.windows, k.String())
	}
	s.mu.Unlock()
	return nil
}

// record returns the live record under key, dropping an expired one.
// s.mu is held.
func (s *Store) record(key string, now time.Time) *record {
	r, ok := s.records[key]
	if ok && !now.Before(r.expires) {
		delete(s.records, key)
		return nil
	}
	return r
}

// held returns h's record if h is its current hold: running, with h's
// token and owner. s.mu is held.
func (s *Store) held(h storage.Hold, now time.Time) *record {
	r := s.record(h.Key.String(), now)
	if r == nil || r.state != dedup.StatusRunning || r.token != h.Token || r.owner != h.Owner {
		return nil
	}
	return r
}

func (s *Store) window(key string, now time.Time) (window, bool) {
	w, ok := s.windows[key]
	if ok && !now.Before(w.expires) {
		delete(s.windows, key)
		return window{}, false
	}
	return w, ok
}

func (s *Store) put(key string, r *record) {
	s.records[key] = r
	s.wrote()
}

// wrote counts a write and, once there have been as many writes as there
// are entries, drops every expired entry: keys nobody reads again go too,
// at a constant cost per write, so the maps stay within about twice what
// is live. s.mu is held.
func (s *Store) wrote() {
	if s.writes++; s.writes < max(len(s.records)+len(s.windows), 64) {
		return
	}
	s.writes = 0
	now := s.now()
	for key, r := range s.records {
		if !now.Before(r.expires) {
			delete(s.records, key)
		}
	}
	for key, w := range s.windows {
		if !now.Before(w.expires) {
			delete(s.windows, key)
		}
	}
}
