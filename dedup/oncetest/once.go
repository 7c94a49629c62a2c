package oncetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/internal/storerule"
	"github.com/onceq/onceq/dedup/storage"
)

// maxRetry is asynq's default MaxRetry: how often a failed delivery comes
// back before asynq archives it.
const maxRetry = 25

// RequireOnce delivers job's task to h deliveries times at once, through
// the Middleware on a fresh in-memory Store, the way asynq delivers a task
// that was enqueued twice or came back after a crash, and fails t unless
// the job's effect happened exactly once. The job comes from your Spec
// (Typed.Job, Catalog.Build), so it is keyed exactly as in production.
//
// Effects are what h reports with Effect, where it acts: in a fake of its
// downstream, say, which acts once per key as a payment gateway does under
// its Idempotency-Key. More than one effect fails t, whether the runs that
// made them returned nil or not: a handler that charges and then fails
// charges again on its retry. A handler that reports no effect is held to
// succeeding (returning nil) exactly once instead.
//
// Each delivery goes on as under asynq: a run that returns an error or
// panics is released by the middleware and retried, up to asynq's default
// 25 retries; a delivery that finds another one running comes back when
// that run ends; one the middleware refuses for good (asynq.SkipRetry: a
// bad payload) ends there.
//
// It returns the job's record, done: Result is what h set with
// dedup.SetResult, the answer every later delivery gets; Attempts counts
// the runs it took. A handler that never returns blocks RequireOnce.
func RequireOnce(t testing.TB, h asynq.Handler, job dedup.Job, deliveries int) storage.Record {
	t.Helper()
	if job.Err != nil {
		t.Fatalf("oncetest: %s: the job was refused: %v", job.Key.Namespace, job.Err)
	}
	return RequireOnceWith(t, dedup.MiddlewareOptions{}, h, job.Task, deliveries)
}

// RequireOnceWith is RequireOnce for a task not built by a Spec (plain
// asynq code enqueued it), with the Middleware configured by opts: give it
// your worker's Catalog, so the task is keyed, validated and kept as the
// worker keys it.
func RequireOnceWith(t testing.TB, opts dedup.MiddlewareOptions, h asynq.Handler, task *asynq.Task, deliveries int) storage.Record {
	t.Helper()
	rec, err := requireOnce(opts, h, task, deliveries, nil)
	if err != nil {
		t.Fatalf("oncetest: %s: %v", task.Type(), err)
	}
	return rec
}

// Effect reports one side effect of the run ctx belongs to: RequireOnce
// fails a job with more than one. Outside RequireOnce it does nothing.
func Effect(ctx context.Context) {
	if n, ok := ctx.Value(effectsKey{}).(*atomic.Int64); ok {
		n.Add(1)
	}
}

type effectsKey struct{}

// requireOnce is RequireOnceWith, with hook (when not nil) seeing every
// event of the store.
func requireOnce(opts dedup.MiddlewareOptions, h asynq.Handler, task *asynq.Task, deliveries int, hook dedup.Observer) (storage.Record, error) {
	if deliveries < 1 {
		return storage.Record{}, fmt.Errorf("%d deliveries, want at least 1", deliveries)
	}
	var ended signal
	store, err := NewStore(storage.Options{Observer: func(ctx context.Context, e dedup.Event) {
		if a, ok := ctx.Value(attemptKey{}).(*attempt); ok && e.Op == storerule.OpClaim {
			a.claim = e.Outcome
		}
		if e.Op == storerule.OpComplete || e.Op == storerule.OpRelease {
			ended.kick()
		}
		if hook != nil {
			hook(ctx, e)
		}
	}})
	if err != nil {
		return storage.Record{}, err
	}
	mw, err := dedup.NewMiddleware(store, opts)
	if err != nil {
		return storage.Record{}, err
	}
	var (
		runs    atomic.Int64
		effects atomic.Int64
		mu      sync.Mutex
		key     *dedup.Key
	)
	handler := mw.Wrap(asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		if r, ok := dedup.RunFromContext(ctx); ok {
			mu.Lock()
			key = &r.Key
			mu.Unlock()
		}
		err := h.ProcessTask(ctx, t)
		if err == nil {
			runs.Add(1)
		}
		return err
	}))
	ends := make([]error, deliveries)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range ends {
		wg.Go(func() {
			<-start
			ends[i] = deliver(context.WithValue(context.Background(), effectsKey{}, &effects), handler, task, &ended)
		})
	}
	close(start)
	wg.Wait()
	if err := mw.Shutdown(context.Background()); err != nil {
		return storage.Record{}, err
	}
	if n := effects.Load(); n > 1 {
		return storage.Record{}, fmt.Errorf("%d effects in %d deliveries (%d runs succeeded), want exactly one%s",
			n, deliveries, runs.Load(), endsOf(ends))
	}
	if n := runs.Load(); n != 1 {
		return storage.Record{}, fmt.Errorf("the handler succeeded %d times in %d deliveries, want exactly once%s",
			n, deliveries, endsOf(ends))
	}
	rec, err := store.Status(context.Background(), *key)
	if err != nil {
		return storage.Record{}, err
	}
	if rec.State != dedup.StatusDone {
		return rec, fmt.Errorf("the record of %s is %s after the deliveries, want done", rec.Key, rec.State)
	}
	return rec, nil
}

type attemptKey struct{}

// attempt is one run of a delivery, as the store saw it.
type attempt struct{ claim dedup.Decision } // the claim's outcome

// deliver takes one delivery to its end as asynq would, and returns the
// error it ended with: nil once it ran or was answered as a duplicate.
func deliver(ctx context.Context, h asynq.Handler, task *asynq.Task, ended *signal) error {
	var err error
	for failures := 0; failures <= maxRetry; {
		a := &attempt{}
		wake := ended.wait() // before the claim, so no ending is missed
		err = process(context.WithValue(ctx, attemptKey{}, a), h, task)
		switch {
		case err == nil:
			return nil
		case a.claim == storerule.OutcomeInProgress:
			<-wake // not a failure to asynq: no retry used up
		case errors.Is(err, asynq.SkipRetry):
			return err
		default:
			failures++
		}
	}
	return err
}

// process is one run; a panic becomes its error, as asynq's recovery makes it.
func process(ctx context.Context, h asynq.Handler, task *asynq.Task) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return h.ProcessTask(ctx, task)
}

// endsOf lists how deliveries that never ended well ended.
func endsOf(ends []error) string {
	var b strings.Builder
	for i, err := range ends {
		if err != nil {
			fmt.Fprintf(&b, "\n\tdelivery %d ended with: %v", i+1, err)
		}
	}
	return b.String()
}

// signal wakes everyone waiting on it each time it is kicked.
type signal struct {
	mu sync.Mutex
	ch chan struct{}
}

// wait returns a channel closed at the next kick.
func (s *signal) wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

func (s *signal) kick() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
}
