package tasks

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup"
)

// ProducerOptions configures NewProducer.
type ProducerOptions struct {
	// Observer sees every enqueue decision (enqueued, duplicate, conflict,
	// throttled). Default: none.
	Observer dedup.Observer
	// Brief skips the two reads (task and record, in parallel) that follow a
	// refused enqueue, so a refusal costs no more than an insert. Those
	// reads are how a conflict is told from a duplicate: a Brief producer
	// reports every refusal as Duplicate with State unknown. Only for
	// callers that never reuse a key for other content (the benchmark).
	// Default: false.
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
//
// Windows are taken only by accepted jobs: a reservation this call took is
// given back (compare-and-delete on its holder) when a later rule, asynq's
// task id check or the enqueue itself refuses the job. A window the same key
// already held is left alone: it belongs to the accepted job. Between the
// reserve and the give-back (one round trip) a concurrent job on the same
// rule key is refused; one script cannot do both, since asynq's keys and
// the window's live in different Cluster slots.
func (p *Producer) Enqueue(ctx context.Context, j Job) (Outcome, error) {
	if j.Task == nil {
		return Outcome{}, errors.New("tasks: enqueue: job has no task")
	}
	holder := j.Key.String()
	out := Outcome{Key: holder, Queue: j.Queue}
	var taken []*Rule
	// The give-back must happen even when the caller's ctx has ended.
	giveBack := func() { p.unreserve(context.WithoutCancel(ctx), taken, holder) }
	for _, r := range []*Rule{j.Rate, j.Window} {
		if r == nil {
			continue
		}
		res, err := p.store.Reserve(ctx, r.Key, r.Window, holder)
		if err != nil {
			giveBack()
			return Outcome{}, fmt.Errorf("tasks: enqueue %s: %w", holder, err)
		}
		if res.Reserved {
			taken = append(taken, r)
			continue
		}
		if res.Holder == holder {
			continue // a repeat of the same key falls through to the task id check
		}
		giveBack()
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
	task := j.Task
	if j.Unique > 0 {
		opts = append(opts, asynq.TaskID(j.Key.TaskID()), asynq.Retention(j.Unique))
		task = leanTask(j, holder)
	}
	if j.MaxRetry > 0 {
		opts = append(opts, asynq.MaxRetry(j.MaxRetry))
	}
	info, err := p.client.EnqueueContext(ctx, task, opts...)
	switch {
	case errors.Is(err, asynq.ErrTaskIDConflict):
		giveBack()
		out.TaskID = j.Key.TaskID()
		p.refused(ctx, j, &out)
	case err != nil:
		giveBack()
		return Outcome{}, fmt.Errorf("tasks: enqueue %s: %w", holder, err)
	default:
		out.Decision, out.TaskID, out.State = Enqueued, info.ID, taskStatus(info.State)
	}
	p.observe(ctx, j, out)
	return out, nil
}

// refused tells a duplicate from a conflict: the accepted task carries its
// fingerprint in a header, and so does the idempotency record once it ran.
// A conflict never carries the other job's result.
func (p *Producer) refused(ctx context.Context, j Job, out *Outcome) {
	if p.opts.Brief {
		out.Decision, out.State = Duplicate, StatusUnknown
		out.Reason = "task id " + j.Key.String() + " already accepted"
		return
	}
	var (
		wg   sync.WaitGroup
		info *asynq.TaskInfo
		rec  dedup.Record
		ierr error
		rerr error
	)
	wg.Go(func() { info, ierr = p.insp.GetTaskInfo(j.Queue, j.Key.TaskID()) })
	wg.Go(func() { rec, rerr = p.store.Status(ctx, j.Key) })
	wg.Wait()
	stored := ""
	if ierr == nil {
		stored = info.Headers[HeaderFingerprint]
	}
	if stored == "" && rerr == nil {
		stored = rec.Fingerprint
	}
	if stored != "" && !dedup.SameFingerprint(stored, j.Fingerprint) {
		out.Decision, out.State = Conflict, StatusUnknown
		out.Reason = "key " + j.Key.String() + " was accepted with other content (fingerprint " + short(stored) +
			", this job " + short(j.Fingerprint) + "); nothing was enqueued"
		return
	}
	out.Decision = Duplicate
	if rerr != nil {
		rec = dedup.Record{State: dedup.StateAbsent}
	}
	if ierr != nil {
		info = nil
	}
	st := statusOf(j.Key, rec, info)
	out.State = st.State
	if st.State == StatusDone {
		out.Result = rec.Result
		if len(out.Result) == 0 && info != nil {
			out.Result = info.Result
		}
	}
	out.Reason = "already accepted: " + string(st.State)
	if st.State == StatusDone {
		out.Reason = "already processed: done"
	}
}

func short(fp string) string {
	if len(fp) > 12 {
		return fp[:12]
	}
	return fp
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
	case Conflict:
		d.Outcome = dedup.OutcomeConflict
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
	Conflict int // keys accepted before with other content
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
		case o.Decision == Conflict:
			r.Conflict++
		default:
			r.Blocked++
		}
	}
	return r
}
