package oncetest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
)

// Enqueuer is an in-memory stand-in for dedup.Producer in tests of the code
// that enqueues, no Redis needed. It answers as the Producer does within a
// key's first life: Enqueued; a repeat with the same content Duplicate
// (pending), with other content Conflict; a job inside one of its Rules'
// windows, or its Spec's Window, Throttled with the time left. It keeps
// what it accepted, in order. It runs nothing, and knows no repeat policy
// or later incarnation: test those against dedup.Producer on a Redis.
//
// Have your code take the one method it needs, which both provide:
//
//	type enqueuer interface {
//		Enqueue(ctx context.Context, j dedup.Job, opts ...asynq.Option) (dedup.Outcome, error)
//	}
type Enqueuer struct {
	now     func() time.Time
	mu      sync.Mutex
	jobs    map[dedup.Key]accepted
	windows map[dedup.Key]held
	order   []dedup.Job
}

type accepted struct {
	job   dedup.Job
	state dedup.Status
	until time.Time // the unique window's end
}

type held struct {
	holder string
	until  time.Time
}

// NewEnqueuer returns an empty Enqueuer on now (nil: time.Now; a Clock's
// Now lets a test move past a window).
func NewEnqueuer(now func() time.Time) *Enqueuer {
	if now == nil {
		now = time.Now
	}
	return &Enqueuer{now: now, jobs: map[dedup.Key]accepted{}, windows: map[dedup.Key]held{}}
}

// Enqueue answers j, with opts added to its own (dedup.Job.With), as
// dedup.Producer.Enqueue would within the key's first life.
func (e *Enqueuer) Enqueue(_ context.Context, j dedup.Job, opts ...asynq.Option) (dedup.Outcome, error) {
	j = j.With(opts...)
	if j.Err != nil {
		return dedup.Outcome{}, j.Err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	holder := j.Key.String()
	out := dedup.Outcome{Key: holder, Queue: j.Queue, TaskID: j.Key.TaskID(), Incarnation: 1}
	a, known := e.jobs[j.Key]
	known = known && now.Before(a.until)
	for _, r := range j.Rules {
		if w, ok := e.windows[r.Key]; ok && now.Before(w.until) && (w.holder != holder || r.Repeats || (r.OutlastsKey && !known)) {
			out.Decision, out.State, out.TaskID, out.Incarnation = dedup.Throttled, dedup.StatusUnknown, "", 0
			out.RetryAfter = w.until.Sub(now)
			out.Reason = r.Key.String() + " is inside its " + r.Window.String() + " window"
			return out, nil
		}
	}
	if known {
		out.Decision, out.State, out.Queue = dedup.Duplicate, a.state, a.job.Queue
		if a.job.Fingerprint != j.Fingerprint {
			out.Decision, out.State = dedup.Conflict, dedup.StatusUnknown
		}
		return out, nil
	}
	state := dedup.StatusPending
	for _, o := range opts {
		if t := o.Type(); t == asynq.ProcessInOpt || t == asynq.ProcessAtOpt {
			state = dedup.StatusScheduled
		}
	}
	e.jobs[j.Key] = accepted{job: j, state: state, until: now.Add(j.Unique)}
	for _, r := range j.Rules {
		if w, ok := e.windows[r.Key]; !ok || !now.Before(w.until) {
			e.windows[r.Key] = held{holder: holder, until: now.Add(r.Window)}
		}
	}
	e.order = append(e.order, j)
	out.Decision, out.State = dedup.Enqueued, state
	return out, nil
}

// Jobs are the jobs accepted, in order.
func (e *Enqueuer) Jobs() []dedup.Job {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]dedup.Job(nil), e.order...)
}

// RequireEnqueued fails t unless e accepted a job under want's key with
// want's content, and returns the accepted job.
func RequireEnqueued(t testing.TB, e *Enqueuer, want dedup.Job) dedup.Job {
	t.Helper()
	e.mu.Lock()
	a, ok := e.jobs[want.Key]
	e.mu.Unlock()
	switch {
	case !ok:
		t.Fatalf("oncetest: no job enqueued under %s (enqueued: %v)", want.Key, keysOf(e.Jobs()))
	case a.job.Fingerprint != want.Fingerprint:
		t.Fatalf("oncetest: %s was enqueued with other content", want.Key)
	}
	return a.job
}

// RequireNotEnqueued fails t if e accepted a job under key.
func RequireNotEnqueued(t testing.TB, e *Enqueuer, key dedup.Key) {
	t.Helper()
	e.mu.Lock()
	_, ok := e.jobs[key]
	e.mu.Unlock()
	if ok {
		t.Fatalf("oncetest: a job was enqueued under %s", key)
	}
}

func keysOf(jobs []dedup.Job) []string {
	keys := make([]string, len(jobs))
	for i, j := range jobs {
		keys[i] = j.Key.String()
	}
	return keys
}
