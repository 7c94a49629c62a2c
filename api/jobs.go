package api

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/hibiken/asynq"
	"go.uber.org/zap"

	"github.com/onceq/onceq/dedup"
)

// Job is the body of GET /v1/jobs/{key}: the idempotency record merged with
// the asynq task. State is pending, scheduled, active, retry, done, failed,
// archived or unknown; Processed is true once the job's effect is recorded.
type Job struct {
	Key         string     `json:"key"`
	Processed   bool       `json:"processed"`
	State       string     `json:"state"`
	Result      any        `json:"result"`
	Error       string     `json:"error,omitempty"`
	Attempts    int        `json:"attempts"`
	FirstSeen   *time.Time `json:"first_seen"`
	CompletedAt *time.Time `json:"completed_at"`
	TaskState   *string    `json:"task_state"`
	Queue       *string    `json:"queue"`
}

func (s *server) job(w http.ResponseWriter, r *http.Request) {
	k, err := dedup.ParseKeyOrTaskID(r.PathValue("key"))
	if err != nil {
		problem(http.StatusBadRequest, probBadRequest, "the job must be a key namespace/id (URL-escaped) or its task id: "+err.Error()).write(w)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.opts.Timeout)
	defer cancel()

	// The inspector takes no context: look the task up aside, so a slow
	// Redis costs this request no more than its time-out.
	type lookup struct {
		info *asynq.TaskInfo
		err  error
	}
	found := make(chan lookup, 1)
	go func() {
		info, err := s.task(k.TaskID())
		found <- lookup{info, err}
	}()
	rec, err := s.opts.Store.Status(ctx, k)
	var t lookup
	if err == nil {
		select {
		case t = <-found:
			err = t.err
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	if err != nil {
		s.opts.Log.Warn("api: job status failed", zap.String("key", k.String()), zap.Error(err))
		unavailable().write(w)
		return
	}
	if rec.State == dedup.StateAbsent && t.info == nil {
		problem(http.StatusNotFound, probNotFound, "no job "+k.String()+" is known (or it expired)").write(w)
		return
	}
	jsonResponse(http.StatusOK, merge(k, rec, t.info)).write(w)
}

// task finds the asynq task with id across the queues; nil when none has it.
func (s *server) task(id string) (*asynq.TaskInfo, error) {
	queues, err := s.insp.Queues()
	if err != nil {
		return nil, err
	}
	for _, q := range queues {
		info, err := s.insp.GetTaskInfo(q, id)
		switch {
		case err == nil:
			return info, nil
		case errors.Is(err, asynq.ErrTaskNotFound), errors.Is(err, asynq.ErrQueueNotFound):
			continue
		default:
			return nil, err
		}
	}
	return nil, nil
}

// merge: the record says whether the effect happened (done), the task
// where the job is in asynq's life cycle otherwise.
func merge(k dedup.Key, rec dedup.Record, info *asynq.TaskInfo) Job {
	j := Job{Key: k.String(), State: "unknown", Attempts: rec.Attempts, Error: rec.Error}
	if !rec.FirstSeen.IsZero() {
		j.FirstSeen = &rec.FirstSeen
	}
	if !rec.CompletedAt.IsZero() {
		j.CompletedAt = &rec.CompletedAt
	}
	if info != nil {
		ts := info.State.String()
		j.TaskState, j.Queue = &ts, &info.Queue
		switch info.State {
		case asynq.TaskStateCompleted:
			j.State = "done"
		case asynq.TaskStateAggregating:
			j.State = "pending"
		default:
			j.State = ts
		}
		if j.CompletedAt == nil && !info.CompletedAt.IsZero() {
			j.CompletedAt = &info.CompletedAt
		}
		if j.Error == "" {
			j.Error = info.LastErr
		}
	} else {
		switch rec.State {
		case dedup.StateRunning:
			j.State = "active"
		case dedup.StateFailed:
			j.State = "failed"
		}
	}
	switch {
	case rec.State == dedup.StateDone:
		j.State, j.Result = "done", result(rec.Result)
	case j.State == "done" && info != nil:
		j.Result = result(info.Result)
	}
	j.Processed = j.State == "done"
	if j.Processed {
		j.Error = "" // an earlier attempt's failure is history
	}
	return j
}
