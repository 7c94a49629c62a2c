package faulttest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/tasks"
)

// Where a key can be, from outside: the life-of-a-key table's states as
// the record and the asynq task show them. Anything else is a stuck key.
const (
	keyDone     = "done"
	keyFree     = "failed-and-free" // failed for good; the next enqueue is a new incarnation
	keyRunnable = "runnable"        // pending, scheduled, retry, or running on a live worker
)

// keyState classifies j's key; ok is false for a stuck key, and detail says
// what was seen. live are the worker processes that may hold a claim.
func (r *rig) keyState(j dedup.Job, live []*worker) (state string, ok bool, detail string) {
	rec, err := r.store.Status(context.Background(), j.Key)
	if err != nil {
		return "", false, err.Error()
	}
	info, err := r.insp.GetTaskInfo(j.Queue, j.Key.TaskID())
	if errors.Is(err, asynq.ErrTaskNotFound) || errors.Is(err, asynq.ErrQueueNotFound) {
		info, err = nil, nil
	}
	if err != nil {
		return "", false, err.Error()
	}
	task := "no task"
	if info != nil {
		task = "task " + info.State.String()
	}
	detail = fmt.Sprintf("%s: record %s (attempts %d, owner %q, error %q), %s",
		j.Key, rec.State, rec.Attempts, rec.Owner, rec.Error, task)
	switch {
	case rec.State == dedup.StatusDone:
		return keyDone, true, detail
	case j.KeepFailed:
		return "", false, detail + ": a type that keeps failed keys has no place in this test"
	case info == nil && rec.State != dedup.StatusRunning:
		// Nothing holds the key: an enqueue starts it afresh.
		return keyFree, true, detail
	case info == nil:
		return "", false, detail + ": a running record without a task"
	}
	switch info.State {
	case asynq.TaskStateArchived:
		return keyFree, true, detail
	case asynq.TaskStatePending, asynq.TaskStateScheduled, asynq.TaskStateRetry:
		return keyRunnable, true, detail
	case asynq.TaskStateActive:
		for _, w := range live {
			if !w.exited() && w.owns(rec) {
				return keyRunnable, true, detail
			}
		}
		return "", false, detail + ": active with no live worker holding it"
	}
	return "", false, detail
}

// leaseScore is when asynq's lease on a task of queue ends, as asynq keeps
// it in the queue's lease set (the recoverer's input); ok is false when the
// task holds no lease.
func (r *rig) leaseScore(queue, taskID string) (time.Time, bool) {
	r.t.Helper()
	s, err := r.rdb.ZScore(context.Background(), "asynq:{"+queue+"}:lease", taskID).Result()
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(int64(s), 0), true
}

// recoverable is a condition: asynq's recoverer, run now, takes every task
// of jobs that holds a lease (it takes leases ended 30 s ago or more).
func (r *rig) recoverable(jobs ...dedup.Job) func() (bool, string) {
	return func() (bool, string) {
		cutoff := time.Now().Add(-30 * time.Second)
		for _, j := range jobs {
			if until, ok := r.leaseScore(j.Queue, j.Key.TaskID()); ok && !until.Before(cutoff) {
				return false, j.Key.String() + "'s asynq lease ends " + until.Format(time.TimeOnly)
			}
		}
		return true, ""
	}
}

// leaseOver is a condition: asynq's lease on each job's task has ended (or
// is gone), as a worker stopped past it would find on waking.
func (r *rig) leaseOver(jobs ...dedup.Job) func() (bool, string) {
	return func() (bool, string) {
		for _, j := range jobs {
			if until, ok := r.leaseScore(j.Queue, j.Key.TaskID()); ok && !until.Before(time.Now()) {
				return false, j.Key.String() + "'s asynq lease ends " + until.Format(time.TimeOnly)
			}
		}
		return true, ""
	}
}

// claimOver is a condition: the onceq claim on each job's key has lapsed,
// so another delivery may take it over.
func (r *rig) claimOver(jobs ...dedup.Job) func() (bool, string) {
	return func() (bool, string) {
		for _, j := range jobs {
			rec, err := r.store.Status(context.Background(), j.Key)
			if err != nil {
				return false, err.Error()
			}
			if rec.State == dedup.StatusRunning && !rec.LeaseUntil.Before(time.Now()) {
				return false, j.Key.String() + " claimed until " + rec.LeaseUntil.Format(time.TimeOnly)
			}
		}
		return true, ""
	}
}

// plainInvalid enqueues, as plain asynq code would, a payment under j's task
// id whose payload the worker refuses as invalid (amount 0): the key fails
// for good at the worker without ever reaching the gateway.
func (r *rig) plainInvalid(j dedup.Job, id string) {
	r.t.Helper()
	payload := `{"payment_id":"` + id + `","account":"acct-` + id + `","amount":0,"currency":"EUR"}`
	queue := j.Queue
	if r.cluster != nil {
		queue = dedup.ClusterQueue(queue, j.Key) // where a Cluster-aware asynq client puts it
	}
	if _, err := r.client.Enqueue(asynq.NewTask(tasks.TypePayment, []byte(payload)), asynq.Queue(queue),
		asynq.TaskID(j.Key.TaskID()), asynq.Retention(time.Hour)); err != nil {
		r.t.Fatalf("plain enqueue of invalid %s: %v", j.Key, err)
	}
}

// enqueueThrough submits j through an outage: an error is retried, and a
// duplicate after an error means the failed call had been written.
func (r *rig) enqueueThrough(j dedup.Job, within time.Duration) (dedup.Outcome, int) {
	r.t.Helper()
	deadline := time.Now().Add(within)
	for errs := 0; ; errs++ {
		o, err := r.prod.Enqueue(context.Background(), j)
		switch {
		case err == nil && (o.Decision == dedup.Enqueued || errs > 0 && o.Decision == dedup.Duplicate):
			return o, errs
		case err == nil:
			r.t.Fatalf("enqueue %s: %+v", j.Key, o)
		case time.Now().After(deadline):
			r.t.Fatalf("enqueue %s: still failing after %s: %v", j.Key, within, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
