package dedup

import (
	"fmt"
	"slices"
	"time"

	"github.com/hibiken/asynq"
)

// Rule is a time window or rate rule: a key with its own window, taken at
// first acceptance, e.g. "scan of file-123 within 30 s" or "500 EUR to
// account A within 60 s". A job refused by a rule is Throttled, never a
// Duplicate: the rule's holder is another job the caller may not read.
type Rule struct {
	// Key of the window. Its ID may be any string: one that is not a valid
	// key id (spaces, braces, too long) or starts with "~" is replaced by
	// "~k" and its hex SHA-256, so account names and the like are usable.
	Key    Key
	Window time.Duration
	// Repeats: a repeat of the job that holds the rule is throttled too (an
	// identical scan within the scan window). Otherwise it falls through to
	// the job's own key: duplicate or conflict.
	Repeats bool
	// OutlastsKey: the window is longer than the job's key remembers the
	// job (a replay window of days, past the done record). A repeat of its
	// holder falls through to the key while the key still answers it
	// (duplicate, conflict, a failed job's next incarnation) and is
	// throttled once the key has forgotten it: no done record, and no task
	// or only a completed one. Without it such a repeat starts the job
	// again. Ignored with Repeats.
	OutlastsKey bool
	// Global: the rule binds every caller, not just the scope the job was
	// built for (Catalog.Build). Default: false, a caller's rules are its own.
	Global bool
}

// Job is a task ready for the Producer: the asynq task with its idempotency
// key, fingerprint and dedup policy. Only a Spec builds Jobs (Typed.Job,
// Catalog.Build), so no way in can forget or bend the policy.
type Job struct {
	Task        *asynq.Task
	Key         Key
	Fingerprint string
	// Queue is the asynq queue: the Spec's Queue, or the shard of it that
	// Key hashes to (Spec.Shards). A Job given another Queue is enqueued
	// there, and Producer.Status still finds it (it looks in the computed
	// shard first, then in every queue).
	Queue string
	// Unique refuses Key again for this long after first acceptance, through
	// the asynq TaskID (no extra round trip) and, once the job is done, its
	// idempotency record.
	Unique time.Duration
	// Rules are the job's windows and rate rules, taken in order.
	Rules []*Rule
	// MaxRetry for asynq, the Spec's; 0 means asynq's default (25). An
	// asynq.MaxRetry option of the job's own wins, 0 included (no retry).
	MaxRetry int
	// Repeat is what a repeat of Key gets before the job starts.
	Repeat Repeat
	// KeepFailed: a job that failed for good keeps blocking Key for the
	// unique window, instead of letting a repeat start a new incarnation.
	KeepFailed bool
	// History: the key keeps its history (Spec.History).
	History bool
	// WriteResult: asynq keeps the completed task, with its result, for
	// Unique (the Spec's WriteResult), for the dashboard.
	WriteResult bool
	// opts are the job's own asynq options (Typed.Job, With), passed to
	// every insert of it, after the library's.
	opts []asynq.Option
	// Err is why the payload was refused (it wraps ErrInvalid): Typed.Job
	// sets it, and Producer.Enqueue returns it without enqueuing.
	Err error
	// lean is the task as the Producer sends it, built with Task (leanTask).
	lean leanCache
}

// Options are the job's own asynq options (Typed.Job, With), in the order
// given; the Spec's are in the Job's fields. For code that keeps a Job to
// enqueue later (an outbox) and builds it again with With.
func (j Job) Options() []asynq.Option { return slices.Clone(j.opts) }

// With returns j with asynq's options opts added to its own, as asynq's
// Enqueue takes them: ProcessIn, ProcessAt, Timeout, Deadline, MaxRetry (0
// means none), Queue and Retention; a later option wins. They go with every
// insert of the job, its replacements and next incarnations included. The
// task id is the job's key, so asynq.TaskID is refused, as are asynq.Unique
// (the key's unique window does its work) and asynq.Group (an aggregated
// task is inserted by a script the library does not guard): j.Err says so,
// and Producer.Enqueue returns it without enqueuing.
func (j Job) With(opts ...asynq.Option) Job {
	if len(opts) == 0 || j.Err != nil {
		return j
	}
	j.opts = append(j.opts[:len(j.opts):len(j.opts)], opts...)
	for _, o := range opts {
		switch o.Type() {
		case asynq.TaskIDOpt:
			j.Err = fmt.Errorf("dedup: %s: asynq.TaskID: the task id is the job's key (%s); choose it with Spec.ID", j.Key.Namespace, j.Key.TaskID())
		case asynq.UniqueOpt:
			j.Err = fmt.Errorf("dedup: %s: asynq.Unique: the key's unique window refuses repeats (Spec.Unique)", j.Key.Namespace)
		case asynq.GroupOpt:
			j.Err = fmt.Errorf("dedup: %s: asynq.Group: aggregated tasks are inserted by a script the library does not guard", j.Key.Namespace)
		case asynq.QueueOpt:
			if q, ok := o.Value().(string); ok && q != "" {
				j.Queue = q
			}
		}
	}
	return j
}
