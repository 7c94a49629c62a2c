package dedup

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup/internal/storerule"
	"github.com/onceq/onceq/dedup/storage"
)

// JobStatus answers "did this job run?": the idempotency record merged with
// the asynq task.
type JobStatus struct {
	Key         string     `json:"key"`
	Processed   bool       `json:"processed"` // State is done
	State       Status     `json:"state"`
	Result      Result     `json:"result"`
	Error       string     `json:"error,omitempty"`
	Attempts    int        `json:"attempts"`
	FirstSeen   *time.Time `json:"first_seen"`
	CompletedAt *time.Time `json:"completed_at"`
	TaskState   *string    `json:"task_state"` // asynq's own word, for operators
	Queue       *string    `json:"queue"`
	// Incarnation is which life of the key the task is: 1, or more after
	// earlier jobs of the key failed for good.
	Incarnation int `json:"incarnation"`
	// EarlierFailures are the errors of those earlier jobs, newest last.
	EarlierFailures []string `json:"earlier_failures,omitempty"`
	// Successor: a job waits as the key's successor (Repeat "successor")
	// and starts when the run ends.
	Successor bool `json:"successor,omitempty"`
	// Detail qualifies State: "done; result no longer kept" for a job
	// whose result TTL is over, remembered by its compact mark alone.
	Detail string `json:"detail,omitempty"`
	// Known is false when neither a record nor a task exists.
	Known bool `json:"-"`
	// result is the record's raw result (Wait hands it to an Outcome).
	result []byte
}

// taskStatus maps asynq's states onto Status.
func taskStatus(s asynq.TaskState) Status {
	switch s {
	case asynq.TaskStateActive:
		return StatusRunning
	case asynq.TaskStatePending, asynq.TaskStateAggregating:
		return StatusPending
	case asynq.TaskStateScheduled:
		return StatusScheduled
	case asynq.TaskStateRetry:
		return StatusRetry
	case asynq.TaskStateArchived:
		return StatusArchived
	case asynq.TaskStateCompleted:
		return StatusDone
	}
	return StatusUnknown
}

// statusOf merges: the record says whether the effect happened (done), the
// task where the job is in asynq's life cycle otherwise. info may be nil.
func statusOf(k Key, rec storage.Record, info *asynq.TaskInfo) JobStatus {
	j := JobStatus{Key: k.String(), State: StatusUnknown, Attempts: rec.Attempts, Error: rec.Error,
		Known: info != nil || rec.State != StatusUnknown}
	if !rec.FirstSeen.IsZero() {
		j.FirstSeen = &rec.FirstSeen
	}
	if !rec.CompletedAt.IsZero() {
		j.CompletedAt = &rec.CompletedAt
	}
	j.Incarnation = 1
	if info != nil {
		j.Incarnation = incarnationOf(info.Headers)
		_ = json.Unmarshal([]byte(info.Headers[headerFailures]), &j.EarlierFailures)
		ts := info.State.String()
		j.TaskState, j.Queue = &ts, &info.Queue
		j.State = taskStatus(info.State)
		if j.CompletedAt == nil && !info.CompletedAt.IsZero() {
			j.CompletedAt = &info.CompletedAt
		}
		if j.Error == "" {
			j.Error = info.LastErr
		}
	} else if rec.State != "" {
		// Without a task the record says where the job is: running,
		// failed, or a state of a Store's own (pgledger's outbox).
		j.State = rec.State
	}
	switch {
	case rec.State == StatusDone:
		j.State, j.Result = StatusDone, resultValue(rec.Result)
		if rec.Compact && info == nil {
			j.Detail = storerule.ReasonCompact
		}
	case j.State == StatusDone && info != nil:
		j.Result = resultValue(info.Result)
	}
	j.Processed = j.State == StatusDone
	if j.Processed {
		j.Error = "" // an earlier attempt's failure is history
	}
	return j
}

// resultValue presents a stored result: its JSON when it is JSON, else a string.
func resultValue(b []byte) Result { return Result(b) }

// Status answers "did this job run?" for a key (the task id). The asynq
// inspector takes no context, so the task is looked up aside and ctx still
// bounds the answer. A done job's task is usually gone (asynq keeps only
// what Spec.WriteResult or an incarnation history asks for): once the
// record says done, the key's own queue is the only one looked in.
func (p *Producer) Status(ctx context.Context, k Key) (JobStatus, error) {
	type lookup struct {
		info *asynq.TaskInfo
		err  error
	}
	first := p.firstQueue(k)
	found := make(chan lookup, 1)
	go func() {
		var t lookup
		if first != "" {
			t.info, t.err = p.taskIn(first, k.TaskID())
		} else {
			t.info, t.err = p.findTask(k, "")
		}
		found <- t
	}()
	rec, err := p.store.Status(ctx, k)
	if err != nil {
		return JobStatus{}, err
	}
	select {
	case t := <-found:
		if t.err == nil && t.info == nil && first != "" && rec.State != StatusDone {
			t.info, t.err = p.findTask(k, first)
		}
		if t.err != nil {
			return JobStatus{}, t.err
		}
		// The two reads ran side by side: a task seen done may have been
		// recorded after the record was read, so read the record again.
		if t.info != nil && t.info.State == asynq.TaskStateCompleted && rec.State != StatusDone {
			if rec, err = p.store.Status(ctx, k); err != nil {
				return JobStatus{}, err
			}
		}
		st := statusOf(k, rec, t.info)
		if s := p.folded.Load(); s != nil && (st.State == StatusRunning || st.State == StatusRetry) {
			// Only a running job has a successor waiting (the sweep starts
			// it within a moment of the run's end).
			n, err := s.rdb.Exists(ctx, nextKey(k)).Result()
			if err != nil {
				return JobStatus{}, err
			}
			st.Successor = n == 1
		}
		return st, nil
	case <-ctx.Done():
		return JobStatus{}, ctx.Err()
	}
}

// firstQueue is the queue k's type's Kind puts it in (its shard; on
// Cluster that shard's home queue of k); "" when the catalog has no such type.
func (p *Producer) firstQueue(k Key) string {
	kind, ok := p.opts.Catalog.lookup(k.Namespace)
	if !ok {
		return ""
	}
	q := queueOf(kind.Queue, k, len(kind.Queues))
	if p.cluster {
		q = homeQueue(q, homeOf(k))
	}
	return q
}

// findTask finds k's asynq task in every queue but skip, where a job given
// another Queue, or enqueued under another shard count, still is; nil when
// none has it.
func (p *Producer) findTask(k Key, skip string) (*asynq.TaskInfo, error) {
	queues, err := p.insp.Queues()
	if err != nil {
		return nil, err
	}
	for _, q := range queues {
		if q == skip {
			continue
		}
		if info, err := p.taskIn(q, k.TaskID()); info != nil || err != nil {
			return info, err
		}
	}
	return nil, nil
}

// taskIn is the task with id in queue; nil, nil when the queue has none.
func (p *Producer) taskIn(queue, id string) (*asynq.TaskInfo, error) {
	info, err := p.insp.GetTaskInfo(queue, id)
	if errors.Is(err, asynq.ErrTaskNotFound) || errors.Is(err, asynq.ErrQueueNotFound) {
		return nil, nil
	}
	return info, err
}
