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

// RequireOnce delivers task to h deliveries times at once, through onceq's
// Middleware on a fresh in-memory Store, the way asynq delivers a task that
// was enqueued twice or came back after a crash, and fails t unless h
// succeeded (returned nil) exactly once.
//
// Each delivery goes on as under asynq: a run that returns an error or
// panics is released by the middleware and retried, up to asynq's default
// 25 retries; a delivery that finds another one running comes back when
// that run ends; one the middleware refuses for good (asynq.SkipRetry: a
// bad payload) ends there. A failed run is taken to have had no effect, so
// a handler fails before its effect, or passes the Downstream key of
// dedup.RunFromContext on so the downstream drops a repeat.
//
// It returns the job's record, done: Result is what h set with
// dedup.SetResult, the answer every later delivery gets; Attempts counts
// the runs it took. A handler that never returns blocks RequireOnce.
func RequireOnce(t testing.TB, h asynq.Handler, task *asynq.Task, deliveries int) storage.Record {
	t.Helper()
	return RequireOnceWith(t, dedup.MiddlewareOptions{}, h, task, deliveries)
}

// RequireOnceWith is RequireOnce with the Middleware configured by opts,
// e.g. with your worker's Catalog, so the task is keyed, validated and
// kept as it is in production.
func RequireOnceWith(t testing.TB, opts dedup.MiddlewareOptions, h asynq.Handler, task *asynq.Task, deliveries int) storage.Record {
	t.Helper()
	rec, err := requireOnce(opts, h, task, deliveries, nil)
	if err != nil {
		t.Fatalf("oncetest: %s: %v", task.Type(), err)
	}
	return rec
}

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
		runs atomic.Int64
		mu   sync.Mutex
		key  *dedup.Key
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
			ends[i] = deliver(handler, task, &ended)
		})
	}
	close(start)
	wg.Wait()
	if err := mw.Shutdown(context.Background()); err != nil {
		return storage.Record{}, err
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
type attempt struct{ claim string } // the claim's outcome

// deliver takes one delivery to its end as asynq would, and returns the
// error it ended with: nil once it ran or was answered as a duplicate.
func deliver(h asynq.Handler, task *asynq.Task, ended *signal) error {
	var err error
	for failures := 0; failures <= maxRetry; {
		a := &attempt{}
		wake := ended.wait() // before the claim, so no ending is missed
		err = process(context.WithValue(context.Background(), attemptKey{}, a), h, task)
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
