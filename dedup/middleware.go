package dedup

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup/storage"
)

// Task headers the producer sets so workers need not re-hash payloads.
const (
	headerKey         = "onceq-key"
	headerFingerprint = "onceq-fp"
	// headerIncarnation numbers the life of the key this task belongs to:
	// "2" for the first job accepted after one failed for good, and so on;
	// absent means 1. Retries keep it; the downstream key changes with it.
	headerIncarnation = "onceq-inc"
)

// typeOptions is how the middleware deduplicates one task type.
type typeOptions struct {
	// Volatile paths left out of the fingerprint (canonical JSON, canonical.go). Default: none.
	Volatile []string
	// Key gives the key and fingerprint of a task that carries none (plain
	// asynq code enqueued it: no headerKey, no key as task id), as the
	// type's producer would: its key rule, not the content hash. An error
	// is a bad payload (asynq.SkipRetry). Default: derive(the task type,
	// payload, "", Volatile).
	Key func(payload []byte) (key Key, fingerprint string, err error)
	// WriteResult copies each result to the task's asynq ResultWriter, so
	// asynqmon shows it: one more Redis round trip per task. Default: false.
	WriteResult bool
	// DoneTTL is how long a done job of this type answers repeats as
	// duplicates. Default: the store's DoneTTL.
	DoneTTL time.Duration
	// ResultTTL is how long of that a done job keeps its result, on
	// onceq's Redis store; a compact mark answers repeats after it.
	// Default: the store's ResultTTL.
	ResultTTL time.Duration
}

// MiddlewareOptions configures NewMiddleware.
type MiddlewareOptions struct {
	// Lease a claim holds while its handler runs; longer than asynq's 30 s
	// lease so a live worker is never taken over. Default: 60s.
	Lease time.Duration
	// Heartbeat is how often all live leases of the process are extended,
	// in one pipelined round trip. Default: Lease/3.
	Heartbeat time.Duration
	// Catalog gives each type's key rule, done TTL and WriteResult; types
	// it does not hold are keyed by the producer's headers or their content
	// hash. Default: none.
	Catalog *Catalog
	types   map[string]typeOptions // tests; else from Catalog
	// Liveness is how long a Server's liveness key lives unless refreshed,
	// which it is every third of it. Once the key of a worker is gone (it
	// was killed, or cut off from Redis that long), the other workers hand
	// the tasks it held back to asynq at once instead of after asynq's
	// lease and recoverer (about two minutes). Default: 3s; negative: off.
	Liveness time.Duration

	// Observer sees the middleware's own decisions (a payload that yields no
	// key); the Store reports the rest. Default: none.
	Observer Observer
	// Trace, when set, is called as each delivery starts, before the claim:
	// the context it returns is the delivery's (claim, handler, completion),
	// and end is called as the delivery ends, with its run (zero when the
	// payload yields no key), the claim's decision ("" when none was made)
	// and the error returned to asynq (for a panic, one naming its value;
	// the panic goes on to asynq). Default: none.
	Trace func(ctx context.Context, t *asynq.Task) (_ context.Context, end func(r Run, d Decision, err error))
	// AllowUnverifiedAsynq lets NewServer run on an asynq release the
	// library was not verified against (its error names the linked one and
	// the verified ones), without what needs asynq's internals: no fast
	// recoverer (a killed worker's tasks come back after asynq's lease and
	// recoverer, 1-2 minutes), and claims and completions as calls of their
	// own (four round trips per task, not two). The Observer hears what is
	// off. Default: false, refuse.
	AllowUnverifiedAsynq bool
}

// Middleware runs asynq handlers inside the idempotency record.
type Middleware struct {
	store storage.Store
	opts  MiddlewareOptions
	types map[string]typeOptions

	mu        sync.Mutex
	active    map[storage.Hold]context.CancelCauseFunc
	keys      map[Key]int           // claims being made or held by this process, per key
	finishing map[storage.Hold]bool // handler done, its run records the end: Shutdown leaves it
	cut       map[storage.Hold]bool // released by Shutdown: the run records nothing more
	// noHist: holds the joined dequeue took for a key whose producer
	// started no history, so their completion does not look for one.
	noHist map[storage.Hold]struct{}
	join   *joiner // a Server's: claims and completions ride asynq's scripts (join.go); nil: none
	stop   chan struct{}
	done   chan struct{}
}

// NewMiddleware starts the heartbeat loop; call Shutdown after the asynq
// server has shut down.
func NewMiddleware(store storage.Store, opts MiddlewareOptions) (*Middleware, error) {
	if opts.Lease == 0 {
		opts.Lease = 60 * time.Second
	}
	if opts.Heartbeat == 0 {
		opts.Heartbeat = opts.Lease / 3
	}
	if opts.Observer == nil {
		opts.Observer = func(context.Context, Event) {}
	}
	if opts.Liveness == 0 {
		opts.Liveness = 3 * time.Second
	}
	if opts.Lease < time.Millisecond || opts.Heartbeat <= 0 || opts.Heartbeat >= opts.Lease {
		return nil, fmt.Errorf("onceq: heartbeat %v must be positive and below the lease %v", opts.Heartbeat, opts.Lease)
	}
	types := opts.types
	if types == nil {
		types = opts.Catalog.typeOptions()
	}
	for typ, o := range types {
		if o.DoneTTL != 0 && o.DoneTTL < time.Millisecond {
			return nil, fmt.Errorf("onceq: type %q: done TTL %v must be 0 (the store's) or at least 1ms", typ, o.DoneTTL)
		}
		if o.ResultTTL != 0 && o.ResultTTL < time.Millisecond {
			return nil, fmt.Errorf("onceq: type %q: result TTL %v must be 0 (the store's) or at least 1ms", typ, o.ResultTTL)
		}
	}
	m := &Middleware{store: store, opts: opts, types: types, active: map[storage.Hold]context.CancelCauseFunc{},
		keys: map[Key]int{}, finishing: map[storage.Hold]bool{}, cut: map[storage.Hold]bool{}, noHist: map[storage.Hold]struct{}{},
		stop: make(chan struct{}), done: make(chan struct{})}
	go m.heartbeat()
	return m, nil
}

// Wrap is an asynq.MiddlewareFunc.
func (m *Middleware) Wrap(next asynq.Handler) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) (err error) {
		if m.opts.Trace == nil {
			return m.deliver(ctx, t, next, &delivery{})
		}
		ctx, end := m.opts.Trace(ctx, t)
		var d delivery
		defer func() {
			if v := recover(); v != nil {
				end(d.run, d.decision, fmt.Errorf("panic: %v", v))
				panic(v)
			}
			end(d.run, d.decision, err)
		}()
		return m.deliver(ctx, t, next, &d)
	})
}

// delivery is what deliver learnt of its run, for Trace.
type delivery struct {
	run      Run
	decision Decision
}

func (m *Middleware) deliver(ctx context.Context, t *asynq.Task, next asynq.Handler, d *delivery) error {
	topts := m.types[t.Type()]
	r, err := runOf(ctx, t, topts)
	if err != nil {
		m.opts.Observer(ctx, Event{Op: opClaim, Key: Key{Namespace: t.Type()}, Outcome: outcomeBadPayload, Reason: err.Error()})
		return fmt.Errorf("%w: %w", err, asynq.SkipRetry)
	}
	d.run = r
	k, fp := r.Key, r.Fingerprint
	c, err := m.claim(withRun(ctx, r), k, fp) // the run names itself in the key's history
	if err != nil {
		return err // Redis trouble: asynq retries
	}
	d.decision = c.Outcome
	switch c.Outcome {
	case Duplicate:
		if w := t.ResultWriter(); w != nil && len(c.Result) > 0 {
			_, _ = w.Write(c.Result) // for asynqmon only; the record holds the result
		}
		return nil
	case InProgress:
		return &inProgressError{Key: k, Until: c.LeaseUntil, Owner: c.Owner}
	case Conflict:
		return fmt.Errorf("%w: %q stored %s, task %s: %w", ErrConflict, k.String(), c.Fingerprint, fp, asynq.SkipRetry)
	}
	r.Attempt = c.Attempt
	d.run = r
	return m.run(withRun(ctx, r), c.Hold, t, topts, next)
}

// claim takes k for this delivery: the asynq task id plus the process's boot
// id, so a claim whose reply was lost is re-taken at once by the retry of the
// same task. While this process already claims or runs k, the claim is made
// without a delivery: a redelivery overlapping a live run must see InProgress,
// not take the run over. A successful claim stays counted in m.keys until
// its hold is untracked.
func (m *Middleware) claim(ctx context.Context, k Key, fp string) (storage.Claim, error) {
	m.mu.Lock()
	busy := m.keys[k] > 0
	m.keys[k]++
	m.mu.Unlock()
	if c, ok := m.join.claimed(ctx, k, fp); ok {
		if c.Outcome != Acquired {
			m.mu.Lock()
			m.dropKey(k)
			m.mu.Unlock()
		}
		return c, nil
	}
	m.join.flushKey(k) // a completion of k still waiting is recorded first
	delivery := ""
	if id, ok := asynq.GetTaskID(ctx); ok && !busy {
		delivery = bootOwner + "/" + strings.ReplaceAll(id, "|", "_")
	}
	c, err := m.store.Claim(ctx, k, fp, m.opts.Lease, delivery)
	if err != nil || c.Outcome != Acquired {
		m.mu.Lock()
		m.dropKey(k)
		m.mu.Unlock()
	}
	return c, err
}

func (m *Middleware) dropKey(k Key) {
	if m.keys[k]--; m.keys[k] <= 0 {
		delete(m.keys, k)
	}
}

func (m *Middleware) run(ctx context.Context, h storage.Hold, t *asynq.Task, o typeOptions, next asynq.Handler) (err error) {
	hctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	hctx, sink := withResultSink(hctx)
	m.track(h, cancel)
	parked := false
	defer func() {
		if !parked {
			m.untrack(h)
		}
	}()

	// Bookkeeping outlives the task's context: a handler that finished must
	// be recorded even if asynq is cancelling it, for as long as the claim
	// can still be ours (one lease from when the handler returned).
	after := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.WithoutCancel(ctx), m.opts.Lease)
	}
	defer func() {
		if r := recover(); r != nil {
			if m.settle(h) {
				bg, stop := after()
				_ = m.store.Release(bg, h, fmt.Sprintf("panic: %v", r))
				stop()
			}
			panic(r) // asynq's recovery turns it into a retry
		}
	}()

	err = next.ProcessTask(hctx, t)
	if !m.settle(h) {
		// Shutdown released the claim and asynq requeued the task: a
		// release or completion now could only be refused, or fail on a
		// Redis the daemon has closed.
		if err == nil {
			err = fmt.Errorf("%w: finished after it: %w", errShutdown, storage.ErrLeaseLost)
			sink.done(err)
		}
		return err
	}
	if err != nil {
		bg, stop := after()
		defer stop()
		if rerr := m.store.Release(bg, h, err.Error()); rerr != nil && !errors.Is(rerr, storage.ErrLeaseLost) {
			return errors.Join(err, rerr)
		}
		return err
	}
	result := sink.b
	if m.join.park(ctx, h, result, o.DoneTTL, o.ResultTTL, sink) {
		// asynq's acknowledgement records it (join.go); the hold stays
		// tracked, and heartbeats extend it, until then.
		parked = true
		m.writeResult(t, o, result)
		return nil
	}
	bg, stop := after()
	defer stop()
	err = m.complete(bg, h, result, o.DoneTTL, o.ResultTTL)
	sink.done(err)
	if err != nil {
		if errors.Is(err, storage.ErrLeaseLost) {
			return nil // another worker took the key over; it decides
		}
		return err
	}
	m.writeResult(t, o, result)
	return nil
}

func (m *Middleware) writeResult(t *asynq.Task, o typeOptions, result []byte) {
	if o.WriteResult && len(result) > 0 {
		if w := t.ResultWriter(); w != nil {
			_, _ = w.Write(result)
		}
	}
}

// complete records the run. Failing here after the effect would let
// another delivery run the handler again once the lease ends, so it keeps
// trying while ctx (the lease) lasts: the hold stays tracked, the heartbeat
// keeps extending it, and the token fences out anything that comes later.
// ttl is the type's done TTL, keep its result TTL (0: the store's).
func (m *Middleware) complete(ctx context.Context, h storage.Hold, result []byte, ttl, keep time.Duration) error {
	store := func(result []byte) error {
		if rs, ok := m.store.(*redisStore); ok {
			return rs.complete(ctx, h, result, ttl, keep)
		}
		return m.store.Complete(ctx, h, result, ttl)
	}
	for attempt := 0; ; attempt++ {
		if attempt > 0 && m.recorded(ctx, h) {
			return nil
		}
		err := store(result)
		if errors.Is(err, storage.ErrResultTooLarge) {
			note := fmt.Appendf(nil, `{"onceq_error":"result of %d bytes not stored"}`, len(result))
			return store(note)
		}
		if err == nil || errors.Is(err, storage.ErrLeaseLost) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(min(100*time.Millisecond<<min(attempt, 5), 2*time.Second)):
		}
	}
}

// recorded reports whether the run of h is recorded done already: a retry
// after a Redis error finds the earlier try written, its reply lost, and
// asking again would only be answered "lease lost".
func (m *Middleware) recorded(ctx context.Context, h storage.Hold) bool {
	rec, err := m.store.Status(ctx, h.Key)
	return err == nil && rec.State == StatusDone && rec.Token == h.Token && rec.Owner == h.Owner
}

// settle reports whether the run of h, whose handler returned, records its
// own end (and keeps Shutdown from releasing h from now on: an effect that
// happened is never released); false once Shutdown has released h.
func (m *Middleware) settle(h storage.Hold) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cut[h] {
		return false
	}
	m.finishing[h] = true
	return true
}

func (m *Middleware) track(h storage.Hold, cancel context.CancelCauseFunc) {
	m.mu.Lock()
	m.active[h] = cancel
	m.mu.Unlock()
}

func (m *Middleware) untrack(h storage.Hold) {
	m.mu.Lock()
	delete(m.noHist, h)
	if _, ok := m.active[h]; ok {
		delete(m.active, h)
		delete(m.finishing, h)
		delete(m.cut, h)
		m.dropKey(h.Key)
	}
	m.mu.Unlock()
}

func (m *Middleware) heartbeat() {
	defer close(m.done)
	tick := time.NewTicker(m.opts.Heartbeat)
	defer tick.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-tick.C:
		}
		m.mu.Lock()
		holds := make([]storage.Hold, 0, len(m.active))
		for h := range m.active {
			holds = append(holds, h)
		}
		m.mu.Unlock()
		if len(holds) == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), m.opts.Heartbeat)
		errs := m.store.Extend(ctx, m.opts.Lease, holds...)
		cancel()
		for i, err := range errs {
			if errors.Is(err, storage.ErrLeaseLost) {
				m.mu.Lock()
				if c, ok := m.active[holds[i]]; ok {
					c(err) // the handler should stop: its completion will be refused
				}
				m.mu.Unlock()
			}
		}
	}
}

// Shutdown stops the heartbeat and releases the claims of handlers still
// running (asynq pushed their tasks back after its ShutdownTimeout), so the
// next delivery can claim at once instead of waiting out the lease. A cut-off
// handler that finishes later is fenced out.
func (m *Middleware) Shutdown(ctx context.Context) error {
	select {
	case <-m.stop:
	default:
		close(m.stop)
	}
	<-m.done
	jerr := m.join.shutdown(ctx) // what asynq did not acknowledge is recorded
	m.mu.Lock()
	cut := make(map[storage.Hold]context.CancelCauseFunc, len(m.active))
	for h, c := range m.active {
		if !m.finishing[h] { // a finished run records its own end
			cut[h] = c
			m.cut[h] = true
		}
	}
	m.mu.Unlock()
	errs := []error{jerr}
	for h, c := range cut {
		if err := m.store.Release(ctx, h, "cut off by shutdown"); err != nil && !errors.Is(err, storage.ErrLeaseLost) {
			errs = append(errs, err)
		}
		c(errShutdown)
	}
	return errors.Join(errs...)
}

// errShutdown is the cause a handler cut off by shutdown is cancelled with.
var errShutdown = errors.New("onceq: shutdown")
