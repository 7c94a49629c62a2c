package dedup_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/dedup/storage"
)

func newMiddleware(t *testing.T, s storage.Store, opts dedup.MiddlewareOptions) *dedup.Middleware {
	t.Helper()
	m, err := dedup.NewMiddleware(s, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Shutdown(context.Background()) })
	return m
}

// effect counts how often a handler's side effect ran, per key.
type effect struct{ n atomic.Int64 }

func (e *effect) handler(result string) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		if _, ok := dedup.KeyFromContext(ctx); !ok {
			return errors.New("no key in handler context")
		}
		e.n.Add(1)
		dedup.SetResult(ctx, []byte(result))
		return nil
	})
}

func TestMiddlewareRunsOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, rec := newStore(t, redistest.Client(t), storage.Options{})
	m := newMiddleware(t, s, dedup.WithTypes(dedup.MiddlewareOptions{}, map[string]dedup.TypeOptions{
		"email:send": {Volatile: []string{"attempt"}},
	}))
	var e effect
	h := m.Wrap(e.handler(`{"sent":true}`))

	first := asynq.NewTask("email:send", []byte(`{"to":"a@x","attempt":1}`))
	again := asynq.NewTask("email:send", []byte(`{"attempt":2, "to":"a@x"}`))
	for _, task := range []*asynq.Task{first, again, again} {
		if err := h.ProcessTask(ctx, task); err != nil {
			t.Fatal(err)
		}
	}
	if e.n.Load() != 1 {
		t.Fatalf("effect ran %d times, want 1", e.n.Load())
	}
	if rec.Count("duplicate") != 2 {
		t.Fatalf("%d duplicates observed, want 2", rec.Count("duplicate"))
	}
	k, _, _ := dedup.Derive("email:send", first.Payload(), "", []string{"attempt"})
	if r, _ := s.Status(ctx, k); r.State != dedup.StatusDone || string(r.Result) != `{"sent":true}` {
		t.Fatalf("status: %+v", r)
	}
}

func TestMiddlewareHeaderKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := newStore(t, redistest.Client(t), storage.Options{})
	m := newMiddleware(t, s, dedup.MiddlewareOptions{})
	var e effect
	h := m.Wrap(e.handler("ok"))
	hdr := map[string]string{dedup.HeaderKey: "payment:charge/pmt-1", dedup.HeaderFingerprint: "fp1"}
	// Different payload bytes, same producer-assigned key and fingerprint: one run.
	for _, p := range []string{`{"a":1}`, `{"a":1,"b":2}`} {
		if err := h.ProcessTask(ctx, asynq.NewTaskWithHeaders("payment:charge", []byte(p), hdr)); err != nil {
			t.Fatal(err)
		}
	}
	if e.n.Load() != 1 {
		t.Fatalf("effect ran %d times, want 1", e.n.Load())
	}
	// Same key, another fingerprint: mismatch, never retried.
	hdr[dedup.HeaderFingerprint] = "fp2"
	err := h.ProcessTask(ctx, asynq.NewTaskWithHeaders("payment:charge", []byte(`{}`), hdr))
	if !errors.Is(err, dedup.ErrMismatch) || !errors.Is(err, asynq.SkipRetry) {
		t.Fatalf("mismatch: %v", err)
	}
	hdr[dedup.HeaderKey] = "payment:charge/{bad}"
	err = h.ProcessTask(ctx, asynq.NewTaskWithHeaders("payment:charge", []byte(`{}`), hdr))
	if !errors.Is(err, dedup.ErrInvalidKey) || !errors.Is(err, asynq.SkipRetry) {
		t.Fatalf("bad header key: %v", err)
	}
}

func TestMiddlewareBadPayloadSkipsRetry(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t, redistest.Client(t), storage.Options{})
	m := newMiddleware(t, s, dedup.MiddlewareOptions{})
	var e effect
	err := m.Wrap(e.handler("")).ProcessTask(context.Background(), asynq.NewTask("scan:file", []byte(`{"path":`)))
	if !errors.Is(err, dedup.ErrBadPayload) || !errors.Is(err, asynq.SkipRetry) || e.n.Load() != 0 {
		t.Fatalf("bad payload: %v, effect %d", err, e.n.Load())
	}
}

func TestMiddlewareReleasesOnErrorAndPanic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := newStore(t, redistest.Client(t), storage.Options{})
	m := newMiddleware(t, s, dedup.MiddlewareOptions{})
	task := asynq.NewTask("payment:charge", []byte(`{"id":"pmt-9"}`))
	k := dedup.Key{Namespace: "payment:charge", ID: "pmt-9"}

	boom := errors.New("gateway 503")
	err := m.Wrap(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return boom })).ProcessTask(ctx, task)
	if !errors.Is(err, boom) {
		t.Fatalf("handler error not returned: %v", err)
	}
	if r, _ := s.Status(ctx, k); r.State != dedup.StatusFailed || r.Error != "gateway 503" {
		t.Fatalf("after error: %+v", r)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("panic was swallowed")
			}
		}()
		_ = m.Wrap(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { panic("nil map") })).ProcessTask(ctx, task)
	}()
	if r, _ := s.Status(ctx, k); r.State != dedup.StatusFailed || !strings.Contains(r.Error, "nil map") || r.Attempts != 2 {
		t.Fatalf("after panic: %+v", r)
	}
	var e effect
	if err := m.Wrap(e.handler("charged")).ProcessTask(ctx, task); err != nil || e.n.Load() != 1 {
		t.Fatalf("third attempt: %v, effect %d", err, e.n.Load())
	}
	if r, _ := s.Status(ctx, k); r.State != dedup.StatusDone || r.Attempts != 3 {
		t.Fatalf("after success: %+v", r)
	}
}

func TestMiddlewareInProgress(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := newStore(t, redistest.Client(t), storage.Options{})
	m := newMiddleware(t, s, dedup.MiddlewareOptions{})
	k := dedup.Key{Namespace: "scan:file", ID: "f-1"}
	other := mustClaim(t, s, k, "", time.Minute, dedup.Acquired) // another worker

	var e effect
	err := m.Wrap(e.handler("")).ProcessTask(ctx, asynq.NewTask("scan:file", []byte(`{"id":"f-1"}`)))
	var ip *dedup.InProgressError
	if !errors.As(err, &ip) || !errors.Is(err, dedup.ErrInProgress) || e.n.Load() != 0 {
		t.Fatalf("in progress: %v, effect %d", err, e.n.Load())
	}
	if dedup.IsFailure(err) || !dedup.IsFailure(errors.New("x")) || dedup.IsFailure(nil) {
		t.Fatal("IsFailure must spare only in-progress errors")
	}
	delay := dedup.RetryDelay(nil)(0, err, nil)
	if until := time.Until(other.LeaseUntil); delay < until/4 || delay > until/4*5/4+time.Second {
		t.Fatalf("retry delay %v, lease ends in %v: want about a quarter of it", delay, until)
	}
	fallback := dedup.RetryDelay(func(int, error, *asynq.Task) time.Duration { return 42 * time.Second })
	if d := fallback(3, errors.New("x"), nil); d != 42*time.Second {
		t.Fatalf("other errors must use the wrapped delay, got %v", d)
	}
}

// The heartbeat keeps a long handler's lease alive; losing the lease cancels
// the handler's context and its completion is refused.
func TestMiddlewareHeartbeatAndLeaseLoss(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, rec := newStore(t, redistest.Client(t), storage.Options{})
	const lease = 2 * time.Second
	m := newMiddleware(t, s, dedup.MiddlewareOptions{Lease: lease, Heartbeat: 30 * time.Millisecond})
	k := dedup.Key{Namespace: "scan:file", ID: "long"}

	started, proceed := make(chan struct{}), make(chan struct{})
	handlerErr, cause := make(chan error, 1), make(chan error, 1)
	go func() {
		handlerErr <- m.Wrap(asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			close(started)
			<-proceed
			cause <- context.Cause(ctx)
			dedup.SetResult(ctx, []byte("stale"))
			return nil
		})).ProcessTask(ctx, asynq.NewTask("scan:file", []byte(`{"id":"long"}`)))
	}()
	<-started
	claimed := time.Now() // the claim was made before this
	// A heartbeat has renewed the lease once it ends later than the claim's
	// own lease could: no sleep past a short lease, which a loaded machine's
	// scheduling could make lapse between two heartbeats.
	waitFor(t, func() bool {
		r, err := s.Status(ctx, k)
		return err == nil && r.LeaseUntil.After(claimed.Add(lease+200*time.Millisecond))
	})
	mustClaim(t, s, k, "", time.Minute, dedup.InProgress)

	// Simulate a takeover: the record vanishes and another worker claims.
	if err := s.Forget(ctx, k); err != nil {
		t.Fatal(err)
	}
	winner := mustClaim(t, s, k, "", time.Minute, dedup.Acquired)
	waitFor(t, func() bool { return rec.Count("lease_lost") > 0 })
	close(proceed)
	if c := <-cause; !errors.Is(c, storage.ErrLeaseLost) {
		t.Fatalf("stale handler's context cause %v, want ErrLeaseLost", c)
	}
	if err := <-handlerErr; err != nil {
		t.Fatalf("stale handler: %v", err)
	}
	if err := s.Complete(ctx, winner.Hold, []byte("winner"), 0); err != nil {
		t.Fatal(err)
	}
	if r, _ := s.Status(ctx, k); string(r.Result) != "winner" {
		t.Fatalf("stale worker overwrote the result: %q", r.Result)
	}
}

func TestMiddlewareShutdownReleasesCutOff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := newStore(t, redistest.Client(t), storage.Options{})
	m, err := dedup.NewMiddleware(s, dedup.MiddlewareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	k := dedup.Key{Namespace: "email:send", ID: "cut"}
	started := make(chan struct{})
	cause := make(chan error, 1)
	go m.Wrap(asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		close(started)
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return ctx.Err()
	})).ProcessTask(ctx, asynq.NewTask("email:send", []byte(`{"id":"cut"}`)))
	<-started
	if err := m.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if c := <-cause; c == nil || !strings.Contains(c.Error(), "shutdown") {
		t.Fatalf("handler context cause %v", c)
	}
	if r, _ := s.Status(ctx, k); r.State != dedup.StatusFailed || r.Error != "cut off by shutdown" {
		t.Fatalf("after shutdown: %+v", r)
	}
	mustClaim(t, s, k, "", time.Minute, dedup.Acquired) // the next delivery need not wait
}

// A handler cut off by shutdown that returns later, when the daemon has
// closed Redis, must not try to release the claim Shutdown released: that
// was a spurious dedup error (or a lease_lost) in the log and metrics.
func TestMiddlewareCutOffHandlerReturnsQuietly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Start(t).Client(t)
	s, rec := newStore(t, rdb, storage.Options{})
	m, err := dedup.NewMiddleware(s, dedup.MiddlewareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	started, closed, returned := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	for _, ok := range []bool{false, true} { // one fails late, one succeeds late
		id := fmt.Sprintf("late-%v", ok)
		go func() {
			returned <- m.Wrap(asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
				started <- struct{}{}
				<-ctx.Done()
				<-closed
				if ok {
					return nil
				}
				return ctx.Err()
			})).ProcessTask(ctx, asynq.NewTask("email:send", []byte(`{"id":"`+id+`"}`)))
		}()
		<-started
	}
	if err := m.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	rdb.Close() // the daemon closes Redis once its stops ran
	close(closed)
	<-returned
	<-returned
	for _, e := range rec.Events() {
		if e.Outcome == "error" || e.Outcome == "lease_lost" {
			t.Errorf("after shutdown: %s %v %s: %s", e.Op, e.Key, e.Outcome, e.Reason)
		}
	}
	if n := rec.Count("released"); n != 2 {
		t.Errorf("%d releases, want 2 (Shutdown's)", n)
	}
}

// The same through asynq: a handler that outlives ShutdownTimeout (asynq
// requeues its task and cancels its context) and returns only once the
// daemon has closed Redis leaves no error and no lost lease behind.
func TestServerCutOffHandlerReturnsQuietly(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	s, rec := newStore(t, rdb, storage.Options{})
	ended := make(chan struct{})
	srv, err := dedup.NewServer(rdb, s, asynq.Config{Concurrency: 1, ShutdownTimeout: 100 * time.Millisecond},
		dedup.MiddlewareOptions{
			Trace: func(ctx context.Context, _ *asynq.Task) (context.Context, func(dedup.Run, dedup.Decision, error)) {
				return ctx, func(dedup.Run, dedup.Decision, error) { close(ended) }
			}})
	if err != nil {
		t.Fatal(err)
	}
	started, closed := make(chan struct{}), make(chan struct{})
	mux := asynq.NewServeMux()
	mux.HandleFunc("email:send", func(ctx context.Context, _ *asynq.Task) error {
		close(started)
		<-ctx.Done()
		<-closed
		return ctx.Err()
	})
	if err := srv.Start(mux); err != nil {
		t.Fatal(err)
	}
	if _, err := asynq.NewClientFromRedisClient(rdb).Enqueue(asynq.NewTask("email:send", []byte(`{"id":"cut"}`))); err != nil {
		t.Fatal(err)
	}
	<-started
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	rdb.Close()
	close(closed)
	<-ended
	for _, e := range rec.Events() {
		if e.Outcome == "error" || e.Outcome == "lease_lost" {
			t.Errorf("after shutdown: %s %v %s: %s", e.Op, e.Key, e.Outcome, e.Reason)
		}
	}
}

// Redis vanishes right after the handler's effect: the middleware keeps
// trying to record completion while its lease lasts, so the job is not run
// again when Redis comes back.
func TestMiddlewareCompletesThroughRedisOutage(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always")
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: 1, DialTimeout: 200 * time.Millisecond, DialerRetries: 1})
	t.Cleanup(func() { rdb.Close() })
	s, _ := newStore(t, rdb, storage.Options{})
	m := newMiddleware(t, s, dedup.MiddlewareOptions{Lease: 30 * time.Second})
	restarted := make(chan error, 1)
	h := asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		dedup.SetResult(ctx, []byte("sent"))
		srv.Stop()
		go func() {
			time.Sleep(4 * time.Second) // longer than go-redis's own retries
			restarted <- srv.Restart()
		}()
		return nil
	})
	if err := m.Wrap(h).ProcessTask(context.Background(), asynq.NewTask("email:send", []byte(`{"id":"outage"}`))); err != nil {
		t.Fatalf("handler succeeded but the middleware reports %v", err)
	}
	if err := <-restarted; err != nil {
		t.Fatal(err)
	}
	r, err := s.Status(context.Background(), dedup.Key{Namespace: "email:send", ID: "outage"})
	if err != nil || r.State != dedup.StatusDone || string(r.Result) != "sent" {
		t.Fatalf("after the outage: %+v %v", r, err)
	}
}
