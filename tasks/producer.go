package tasks

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup"
)

// ProducerOptions configures NewProducer.
type ProducerOptions struct {
	// Observer sees every enqueue decision (enqueued, duplicate, throttled).
	// Default: none.
	Observer dedup.Observer
	// UniqueWindow replaces the unique window of every job that has one
	// (constructors set DefaultUniqueWindow). Default: the job's own.
	UniqueWindow time.Duration
	// Brief skips looking up a duplicate's state and result (two reads, in
	// parallel), so a refused duplicate costs no more than an insert; its
	// Outcome then carries only the task id. Default: false.
	Brief bool
}

// Producer enqueues Jobs under their dedup policy. Safe for concurrent use.
type Producer struct {
	client *asynq.Client
	insp   *asynq.Inspector
	store  dedup.Store
	opts   ProducerOptions
}

// NewProducer builds a Producer on rdb; the caller owns rdb and closes it.
func NewProducer(rdb redis.UniversalClient, store dedup.Store, opts ProducerOptions) *Producer {
	if opts.Observer == nil {
		opts.Observer = func(context.Context, dedup.Decision) {}
	}
	return &Producer{
		client: asynq.NewClientFromRedisClient(rdb),
		insp:   asynq.NewInspectorFromRedisClient(rdb),
		store:  store,
		opts:   opts,
	}
}

var _ Enqueuer = (*Producer)(nil)

// Enqueue submits j unless its policy refuses it. The default policy (unique
// window) costs exactly the one round trip of asynq's Enqueue: the key is the
// asynq TaskID, which asynq refuses atomically while the task is retained. A
// window or rate rule adds one Reserve each.
func (p *Producer) Enqueue(ctx context.Context, j Job) (Outcome, error) {
	if j.Task == nil {
		return Outcome{}, errors.New("tasks: enqueue: job has no task")
	}
	holder := j.Key.String()
	out := Outcome{Key: holder, Queue: j.Queue}
	var reserved []*Rule
	for _, r := range []*Rule{j.Rate, j.Window} {
		if r == nil {
			continue
		}
		res, err := p.store.Reserve(ctx, r.Key, r.Window, holder)
		if err != nil {
			p.unreserve(ctx, reserved, holder)
			return Outcome{}, fmt.Errorf("tasks: enqueue %s: %w", holder, err)
		}
		if res.Reserved || res.Holder == holder {
			reserved = append(reserved, r) // a repeat of the same job falls through to the TaskID check
			continue
		}
		p.unreserve(ctx, reserved, holder)
		out.RetryAfter = res.RetryAfter
		if r == j.Rate {
			out.Decision = Throttled
			out.Reason = fmt.Sprintf("%s seen within %s (as %s)", r.Key.String(), r.Window, res.Holder)
		} else {
			out.Decision = Duplicate
			if hk, err := dedup.ParseKey(res.Holder); err == nil {
				out.TaskID = hk.TaskID()
			}
			out.Reason = fmt.Sprintf("%s already accepted within %s", r.Key.String(), r.Window)
		}
		p.observe(ctx, j, out)
		return out, nil
	}

	opts := []asynq.Option{asynq.Queue(j.Queue)}
	if j.Unique > 0 {
		window := j.Unique
		if p.opts.UniqueWindow > 0 {
			window = p.opts.UniqueWindow
		}
		opts = append(opts, asynq.TaskID(j.Key.TaskID()), asynq.Retention(window))
	}
	if j.MaxRetry > 0 {
		opts = append(opts, asynq.MaxRetry(j.MaxRetry))
	}
	info, err := p.client.EnqueueContext(ctx, j.Task, opts...)
	switch {
	case errors.Is(err, asynq.ErrTaskIDConflict):
		out.Decision, out.TaskID = Duplicate, j.Key.TaskID()
		out.Reason = "task id " + out.TaskID + " already accepted"
		if !p.opts.Brief {
			out.State, out.Result = p.describe(ctx, j.Queue, j.Key)
			out.Reason = "already accepted: " + out.State
			if out.State == "completed" {
				out.Reason = "already processed: completed"
			}
		}
	case err != nil:
		// Not accepted: free the windows so a retry is not refused.
		p.unreserve(context.WithoutCancel(ctx), reserved, holder)
		return Outcome{}, fmt.Errorf("tasks: enqueue %s: %w", holder, err)
	default:
		out.Decision, out.TaskID, out.State = Enqueued, info.ID, info.State.String()
	}
	p.observe(ctx, j, out)
	return out, nil
}

// describe reads the existing task's state and the idempotency record.
// The record wins: "completed" means the handler's effect was recorded.
func (p *Producer) describe(ctx context.Context, queue string, k dedup.Key) (string, []byte) {
	var (
		wg   sync.WaitGroup
		info *asynq.TaskInfo
		rec  dedup.Record
		ierr error
		rerr error
	)
	wg.Go(func() { info, ierr = p.insp.GetTaskInfo(queue, k.TaskID()) })
	wg.Go(func() { rec, rerr = p.store.Status(ctx, k) })
	wg.Wait()
	if rerr == nil && rec.State == dedup.StateDone {
		return "completed", rec.Result
	}
	if ierr != nil {
		return "unknown", nil
	}
	return info.State.String(), info.Result
}

func (p *Producer) unreserve(ctx context.Context, rules []*Rule, holder string) {
	for _, r := range rules {
		_ = p.store.Unreserve(ctx, r.Key, holder) // best effort: the window expires anyway
	}
}

func (p *Producer) observe(ctx context.Context, j Job, o Outcome) {
	d := dedup.Decision{Op: dedup.OpEnqueue, Key: j.Key, Reason: o.Reason}
	switch o.Decision {
	case Enqueued:
		d.Outcome = dedup.OutcomeEnqueued
	case Duplicate:
		d.Outcome = dedup.OutcomeDuplicate
	case Throttled:
		d.Outcome = dedup.OutcomeThrottled
	}
	p.opts.Observer(ctx, d)
}

// BatchResult is the per-item outcome of EnqueueBatch and its counts.
type BatchResult struct {
	Outcomes []Outcome
	Errors   []error // Errors[i] is set when item i failed outright
	Enqueued int
	Blocked  int // duplicates and throttled
	Failed   int
}

// EnqueueBatch enqueues each job in order (a later job is a duplicate of an
// earlier one in the same batch) and reports per-item outcomes.
func (p *Producer) EnqueueBatch(ctx context.Context, jobs []Job) BatchResult {
	r := BatchResult{Outcomes: make([]Outcome, len(jobs)), Errors: make([]error, len(jobs))}
	for i, j := range jobs {
		o, err := p.Enqueue(ctx, j)
		r.Outcomes[i], r.Errors[i] = o, err
		switch {
		case err != nil:
			r.Failed++
		case o.Decision == Enqueued:
			r.Enqueued++
		default:
			r.Blocked++
		}
	}
	return r
}

// Status answers "did this job already run?" for a key or task id.
func (p *Producer) Status(ctx context.Context, k dedup.Key) (dedup.Record, error) {
	return p.store.Status(ctx, k)
}
