package dedup

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup/internal/asynqwire"
	"github.com/onceq/onceq/dedup/internal/mark"
	"github.com/onceq/onceq/dedup/internal/storerule"
	"github.com/onceq/onceq/dedup/storage"
)

// redisStore is the Store on Redis: single, Sentinel or Cluster alike.
type redisStore struct {
	rdb  redis.UniversalClient
	opts storage.Options
	// marks: done keys are compacted to marks (internal/mark) after their
	// result TTL, which the store's options put below the done TTL (a
	// type's own ResultTTL counts only then).
	marks bool
}

var _ storage.Store = (*redisStore)(nil)

// NewRedisStore returns the Store on rdb: the one NewServer, NewProducer
// and NewMiddleware use for a nil store, with the default options. Build
// one for other TTLs or an Observer of the store's decisions. The caller
// owns rdb and closes it.
func NewRedisStore(rdb redis.UniversalClient, opts storage.Options) (storage.Store, error) {
	return newRedisStore(rdb, opts)
}

func newRedisStore(rdb redis.UniversalClient, opts storage.Options) (*redisStore, error) {
	opts, err := withDefaults(opts)
	if err != nil {
		return nil, err
	}
	return &redisStore{rdb: rdb, opts: opts, marks: mark.Used(opts.DoneTTL, opts.ResultTTL)}, nil
}

// markArgs are the registry key and mark id of k's compact mark for a
// script. Marks are read wherever they may be: a store with other options
// may have written them.
func (s *redisStore) markArgs(k Key) (reg, id string) { return markKey(k), markID(k) }

func (s *redisStore) observe(ctx context.Context, op string, k Key, o Decision, tok int64, reason string) {
	s.opts.Observer(ctx, Event{Op: op, Key: k, Outcome: o, Token: tok, Reason: reason})
}

func (s *redisStore) fail(ctx context.Context, op string, k Key, err error) error {
	s.observe(ctx, op, k, outcomeError, 0, err.Error())
	return fmt.Errorf("onceq: %s %q: %w", op, k.String(), err)
}

func (s *redisStore) runningTTL(lease time.Duration) int64 {
	return (lease + s.opts.FailedTTL).Milliseconds()
}

// Claim implements Store. Where done keys leave compact marks, every claim
// is claim.lua, which looks for the mark of an absent record. Elsewhere
// (Cluster) the common case, no record yet, is one plain SET NX PX GET
// that writes the running record; a done record it returns answers a
// duplicate or a mismatch at once, and only a running or failed record
// needs claim.lua, whatever its fingerprint: a mismatch is decided against
// a done record alone. claim.lua records an acquired claim in the key's
// history (the run in ctx names its task and incarnation there); the plain
// SET does not: its run's end is recorded.
func (s *redisStore) Claim(ctx context.Context, k Key, fingerprint string, lease time.Duration, delivery string) (storage.Claim, error) {
	if err := storerule.AtLeastMS("lease", lease); err != nil {
		return storage.Claim{}, fmt.Errorf("onceq: claim %q: %w", k.String(), err)
	}
	owner, reentrant := delivery, delivery != ""
	if !reentrant {
		owner = s.opts.Owner
	}
	if err := errors.Join(checkField("fingerprint", fingerprint), checkField("delivery", owner)); err != nil {
		return storage.Claim{}, fmt.Errorf("onceq: claim %q: %w", k.String(), err)
	}
	tok, now := nextToken(), time.Now().UnixMilli()
	if s.marks {
		c, err := s.claimSlow(ctx, k, fingerprint, owner, reentrant, tok, now, lease)
		if err != nil {
			return storage.Claim{}, s.fail(ctx, opClaim, k, err)
		}
		s.report(ctx, k, c)
		return c, nil
	}
	key := recordKey(k)
	old, err := s.rdb.SetArgs(ctx, key, packRunning(tok, owner, 1, now, fingerprint, now, s.opts.FailedTTL),
		redis.SetArgs{Mode: "NX", TTL: lease + s.opts.FailedTTL, Get: true}).Result()
	var c storage.Claim
	switch {
	case errors.Is(err, redis.Nil): // written: ours
		c = storage.Claim{Outcome: Acquired, Hold: storage.Hold{Key: k, Token: tok, Owner: owner}, Attempt: 1,
			LeaseUntil: time.Now().Add(lease)}
	case err != nil:
		return storage.Claim{}, s.fail(ctx, opClaim, k, err)
	default:
		c, err = s.decide(k, fingerprint, old, -1)
		if err == nil && c.Outcome == "" {
			c, err = s.claimSlow(ctx, k, fingerprint, owner, reentrant, tok, now, lease)
		}
		if err != nil {
			return storage.Claim{}, s.fail(ctx, opClaim, k, err)
		}
	}
	s.report(ctx, k, c)
	return c, nil
}

// report observes the outcome of a claim of k.
func (s *redisStore) report(ctx context.Context, k Key, c storage.Claim) {
	switch c.Outcome {
	case Acquired:
		s.observe(ctx, opClaim, k, outcomeClaimed, c.Hold.Token, "")
	case Duplicate:
		reason := storerule.ReasonDuplicate(c.CompletedAt)
		if c.Compact {
			reason = storerule.ReasonCompact + ", " + reason
		}
		s.observe(ctx, opClaim, k, outcomeDuplicate, 0, reason)
	case InProgress:
		s.observe(ctx, opClaim, k, outcomeInProgress, 0, storerule.ReasonInProgress(c.Owner, c.LeaseUntil))
	case Conflict:
		s.observe(ctx, opClaim, k, outcomeMismatch, 0, storerule.ReasonMismatch(c.Fingerprint))
	}
}

// decide answers a claim from a record it did not acquire. pttl < 0 means
// unknown: a running or failed record then needs claim.lua (Outcome ""). A
// running record with a known pttl is a live lease, whichever fingerprint
// it holds: the newer job waits for it instead of being archived.
func (s *redisStore) decide(k Key, fingerprint, v string, pttl int64) (storage.Claim, error) {
	if m, ok := readMark(v); ok {
		if !m.same {
			return storage.Claim{Outcome: Conflict, Compact: true}, nil
		}
		return storage.Claim{Outcome: Duplicate, Compact: true, CompletedAt: time.UnixMilli(m.at)}, nil
	}
	p, err := unpack(v)
	if err != nil {
		return storage.Claim{}, err
	}
	switch {
	case p.state == 'd' && p.mismatch(fingerprint):
		return storage.Claim{Outcome: Conflict, Fingerprint: p.fp}, nil
	case p.state == 'd':
		return storage.Claim{Outcome: Duplicate, Result: []byte(p.tail), CompletedAt: time.UnixMilli(p.updated)}, nil
	case pttl < 0:
		return storage.Claim{}, nil
	case p.state == 'r':
		left := time.Duration(pttl)*time.Millisecond - p.grace()
		return storage.Claim{Outcome: InProgress, LeaseUntil: time.Now().Add(left), Owner: p.owner}, nil
	}
	return storage.Claim{}, fmt.Errorf("claim.lua declined a %c record", p.state)
}

func (s *redisStore) claimSlow(ctx context.Context, k Key, fingerprint, owner string, reentrant bool, tok, now int64, lease time.Duration) (storage.Claim, error) {
	again := "0"
	if reentrant {
		again = "1"
	}
	keys := []string{recordKey(k), historyKey(k)}
	reg, id := s.markArgs(k)
	if reg != "" {
		keys = append(keys, reg)
	}
	v, err := claimScript.Run(ctx, s.rdb, keys, fingerprint, owner, tok, now,
		lease.Milliseconds(), s.opts.FailedTTL.Milliseconds(), again, workerEntry(ctx, k, Acquired, ""), id).Slice()
	if err != nil {
		return storage.Claim{}, err
	}
	if len(v) == 4 && asInt(v[0]) == 1 {
		return storage.Claim{Outcome: Acquired, Hold: storage.Hold{Key: k, Token: asInt(v[1]), Owner: owner},
			Attempt: int(asInt(v[2])), LeaseUntil: time.Now().Add(lease)}, nil
	}
	if len(v) == 3 && asInt(v[0]) == 0 {
		rec, _ := v[1].(string)
		return s.decide(k, fingerprint, rec, asInt(v[2]))
	}
	return storage.Claim{}, fmt.Errorf("unexpected reply %v", v)
}

func asInt(v any) int64 {
	switch t := v.(type) {
	case int64:
		return t
	case string:
		n, _ := strconv.ParseInt(t, 10, 64)
		return n
	}
	return 0
}

// Extend implements Store. All holds go out in one pipeline: one round trip
// per heartbeat tick, however many tasks the process runs.
func (s *redisStore) Extend(ctx context.Context, lease time.Duration, holds ...storage.Hold) []error {
	errs := make([]error, len(holds))
	if len(holds) == 0 {
		return errs
	}
	ttl := s.runningTTL(lease)
	cmds := make([]*redis.Cmd, len(holds))
	_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, h := range holds {
			cmds[i] = extendScript.EvalSha(ctx, p, []string{recordKey(h.Key)}, holderPrefix(h), ttl)
		}
		return nil
	})
	// Scripts not loaded yet (first use, or Redis restarted): EvalSha failed
	// with NOSCRIPT; Run loads them for the next tick.
	for i, h := range holds {
		n, err := cmds[i].Int64()
		if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			n, err = extendScript.Run(ctx, s.rdb, []string{recordKey(h.Key)}, holderPrefix(h), ttl).Int64()
		}
		switch {
		case err != nil:
			errs[i] = s.fail(ctx, opExtend, h.Key, err)
		case n == 0:
			s.observe(ctx, opExtend, h.Key, outcomeLeaseLost, h.Token, storerule.ReasonStale)
			errs[i] = fmt.Errorf("onceq: extend %q: %w", h.Key.String(), storage.ErrLeaseLost)
		default:
			s.observe(ctx, opExtend, h.Key, outcomeExtended, h.Token, "")
		}
	}
	return errs
}

// Complete implements Store, with the store's result TTL.
func (s *redisStore) Complete(ctx context.Context, h storage.Hold, result []byte, ttl time.Duration) error {
	return s.complete(ctx, h, result, ttl, 0)
}

// complete is Complete keeping the result for keep (0: the store's
// ResultTTL), then the key's compact mark to the done TTL.
func (s *redisStore) complete(ctx context.Context, h storage.Hold, result []byte, ttl, keep time.Duration) error {
	if len(result) > s.opts.MaxResultBytes {
		return fmt.Errorf("onceq: complete %q: %d bytes over %d: %w",
			h.Key.String(), len(result), s.opts.MaxResultBytes, storage.ErrResultTooLarge)
	}
	c, err := s.completion(h, result, ttl, keep, true)
	if err != nil {
		return fmt.Errorf("onceq: complete %q: %w", h.Key.String(), err)
	}
	n, err := finishScript.Run(ctx, s.rdb, []string{c.Record, c.History, c.Marks},
		c.Holder, "d", c.Now.UnixMilli(), c.Result, c.TTL.Milliseconds(),
		workerEntry(ctx, h.Key, outcomeCompleted, ""), c.Mark.Bucket, c.ResultTTL.Milliseconds(), "",
		c.Mark.Field, c.Mark.Offset, c.Mark.TTL, c.Mark.Ends).Int64()
	return s.finish(ctx, opComplete, outcomeCompleted, h, n, err)
}

// completion is what finish.lua writes for the completion of h (the
// joined acknowledgement's too): done for ttl, its result kept for keep
// (0s: the store's), then its compact mark where the store keeps marks and
// the result goes first; hist false: the key keeps no history (the joined
// dequeue said so), and none is named.
func (s *redisStore) completion(h storage.Hold, result []byte, ttl, keep time.Duration, hist bool) (asynqwire.Completion, error) {
	ttl, err := storerule.DoneTTL(s.opts.DoneTTL, ttl)
	if err != nil {
		return asynqwire.Completion{}, err
	}
	keep, err = storerule.ResultTTL(s.opts.ResultTTL, keep)
	if err != nil {
		return asynqwire.Completion{}, err
	}
	c := asynqwire.Completion{Record: recordKey(h.Key), Holder: holderPrefix(h), Now: time.Now(), Result: result,
		TTL: ttl, ResultTTL: ttl}
	// Each key name is built only where it is sent: a task's completion
	// is the worker's most frequent call.
	marks := s.marks && mark.Used(ttl, keep)
	if !hist || !marks {
		none := noneKey(h.Key)
		c.History, c.Marks = none, none
	}
	if hist {
		c.History = historyKey(h.Key)
	}
	if marks {
		c.Marks = markKey(h.Key)
		c.Mark = mark.At(c.Marks, markID(h.Key), c.Now, ttl)
		c.ResultTTL = keep
	}
	return c, nil
}

// Release implements Store.
func (s *redisStore) Release(ctx context.Context, h storage.Hold, cause string) error {
	n, err := finishScript.Run(ctx, s.rdb, []string{recordKey(h.Key), historyKey(h.Key)},
		holderPrefix(h), "f", time.Now().UnixMilli(), cause, s.opts.FailedTTL.Milliseconds(),
		workerEntry(ctx, h.Key, outcomeReleased, cause)).Int64()
	return s.finishWhy(ctx, opRelease, outcomeReleased, h, n, err, cause)
}

func (s *redisStore) finish(ctx context.Context, op string, ok Decision, h storage.Hold, n int64, err error) error {
	return s.finishWhy(ctx, op, ok, h, n, err, "")
}

// finishWhy is finish whose event carries reason (a release's cause).
func (s *redisStore) finishWhy(ctx context.Context, op string, ok Decision, h storage.Hold, n int64, err error, reason string) error {
	switch {
	case err != nil:
		return s.fail(ctx, op, h.Key, err)
	case n == 0:
		s.observe(ctx, op, h.Key, outcomeLeaseLost, h.Token, storerule.ReasonStale)
		return fmt.Errorf("onceq: %s %q: %w", op, h.Key.String(), storage.ErrLeaseLost)
	}
	s.observe(ctx, op, h.Key, ok, h.Token, reason)
	return nil
}

// Status implements Store. A key its compact mark alone remembers is done,
// Compact.
func (s *redisStore) Status(ctx context.Context, k Key) (storage.Record, error) {
	r, _, err := s.status(ctx, k, "")
	return r, err
}

// status is Status, and whether a compact mark holds k for other content
// than fingerprint fp.
func (s *redisStore) status(ctx context.Context, k Key, fp string) (storage.Record, bool, error) {
	r, other, err := s.readStatus(ctx, k, fp)
	if err != nil {
		return storage.Record{}, false, fmt.Errorf("onceq: status %q: %w", k.String(), err)
	}
	return r, other, nil
}

func (s *redisStore) readStatus(ctx context.Context, k Key, fp string) (storage.Record, bool, error) {
	reg, id := s.markArgs(k)
	v, err := statusScript.Run(ctx, s.rdb, []string{recordKey(k), reg}, id, time.Now().UnixMilli(), fp).Slice()
	if err != nil {
		return storage.Record{}, false, err
	}
	if len(v) < 2 {
		return storage.Record{Key: k, State: StatusUnknown}, false, nil
	}
	rec, _ := v[0].(string)
	m, marked := readMark(rec)
	r, err := recordOf(k, rec, time.Duration(asInt(v[1]))*time.Millisecond)
	if err == nil && len(v) == 3 { // the key is remembered until its mark ends
		r.ExpiresIn = time.Duration(asInt(v[2])-time.Now().UnixMilli()) * time.Millisecond
	}
	return r, marked && !m.same, err
}

// recordOf reads the packed record v of k, whose PTTL was ttl.
func recordOf(k Key, v string, ttl time.Duration) (storage.Record, error) {
	r := storage.Record{Key: k, State: StatusUnknown}
	if m, ok := readMark(v); ok {
		r.State, r.Compact, r.CompletedAt = StatusDone, true, time.UnixMilli(m.at)
		r.UpdatedAt = r.CompletedAt
		return r, nil
	}
	p, err := unpack(v)
	if err != nil {
		return storage.Record{}, err
	}
	r.Fingerprint, r.Attempts, r.Token, r.Owner = p.fp, p.attempts, p.token, p.owner
	r.FirstSeen, r.UpdatedAt = time.UnixMilli(p.firstSeen), time.UnixMilli(p.updated)
	if ttl > 0 {
		r.ExpiresIn = ttl
	}
	switch p.state {
	case 'r':
		r.State = StatusRunning
		r.LeaseUntil = time.Now().Add(r.ExpiresIn - p.grace())
	case 'd':
		r.State = StatusDone
		r.Result = []byte(p.tail)
		r.CompletedAt = r.UpdatedAt
	case 'f':
		r.State = StatusFailed
		r.Error = p.tail
	}
	return r, nil
}

// Forget implements Store.
func (s *redisStore) Forget(ctx context.Context, k Key) error {
	var err error
	if reg, id := s.markArgs(k); reg != "" {
		err = forgetScript.Run(ctx, s.rdb, []string{recordKey(k), windowKey(k), reg}, id, time.Now().UnixMilli()).Err()
	} else {
		// Two keys in one slot (same hash tag): one DEL works on Cluster too.
		err = s.rdb.Del(ctx, recordKey(k), windowKey(k)).Err()
	}
	if err != nil {
		return fmt.Errorf("onceq: forget %q: %w", k.String(), err)
	}
	return nil
}

// Reserve implements Store.
func (s *redisStore) Reserve(ctx context.Context, k Key, window time.Duration, holder string) (storage.Reservation, error) {
	if err := storerule.AtLeastMS("window", window); err != nil {
		return storage.Reservation{}, fmt.Errorf("onceq: reserve %q: %w", k.String(), err)
	}
	v, err := reserveScript.Run(ctx, s.rdb, []string{windowKey(k)}, holder, window.Milliseconds()).Slice()
	if err != nil {
		return storage.Reservation{}, s.fail(ctx, opReserve, k, err)
	}
	if len(v) == 1 {
		s.observe(ctx, opReserve, k, outcomeReserved, 0, "")
		return storage.Reservation{Reserved: true}, nil
	}
	if len(v) != 3 {
		return storage.Reservation{}, s.fail(ctx, opReserve, k, fmt.Errorf("unexpected reply %v", v))
	}
	r := storage.Reservation{RetryAfter: time.Duration(max(asInt(v[2]), 0)) * time.Millisecond}
	r.Holder, _ = v[1].(string)
	if r.Holder == holder {
		// The same job again: its own window does not throttle it.
		s.observe(ctx, opReserve, k, outcomeReserved, 0, storerule.ReasonSameHolder)
		return r, nil
	}
	s.observe(ctx, opReserve, k, outcomeThrottled, 0, storerule.ReasonThrottled(r.Holder, r.RetryAfter))
	return r, nil
}

// Unreserve implements Store.
func (s *redisStore) Unreserve(ctx context.Context, k Key, holder string) error {
	if err := unreserveScript.Run(ctx, s.rdb, []string{windowKey(k)}, holder).Err(); err != nil {
		return fmt.Errorf("onceq: unreserve %q: %w", k.String(), err)
	}
	return nil
}
