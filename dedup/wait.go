package dedup

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
)

// Wait polls j's record and task until the job is done or failed for good,
// or timeout passes (no error: the status says where the job is), starting
// at 10 ms between reads and backing off to 250 ms. When ctx ends first,
// its error is returned.
func (p *Producer) Wait(ctx context.Context, j Job, timeout time.Duration) (JobStatus, error) {
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	pause := 10 * time.Millisecond
	var last JobStatus
	for {
		if err := parent.Err(); err != nil {
			return JobStatus{}, fmt.Errorf("dedup: wait for %s: %w", j.Key, err)
		}
		// The task is read before the record: the middleware records
		// completion before asynq marks the task done, so a task seen done
		// has its result in the record read after it.
		info, ierr := p.insp.GetTaskInfo(j.Queue, j.Key.TaskID())
		if ierr != nil && !errors.Is(ierr, asynq.ErrTaskNotFound) && !errors.Is(ierr, asynq.ErrQueueNotFound) {
			return JobStatus{}, ierr
		}
		if ierr != nil {
			info = nil
		}
		rec, err := p.store.Status(ctx, j.Key)
		switch {
		case err != nil && parent.Err() != nil:
			return JobStatus{}, fmt.Errorf("dedup: wait for %s: %w", j.Key, parent.Err())
		case err != nil && ctx.Err() != nil:
			if last.Key == "" {
				return JobStatus{}, fmt.Errorf("dedup: wait for %s: no answer within %s: %w", j.Key, timeout, err)
			}
			return last, nil // the timeout ended this read: where the job was
		case err != nil:
			return JobStatus{}, err
		}
		st := statusOf(j.Key, rec, info)
		st.result = rec.Result
		if len(st.result) == 0 && info != nil {
			st.result = info.Result
		}
		switch st.State {
		case StatusDone, StatusFailed, StatusArchived:
			return st, nil
		}
		last = st
		select {
		case <-ctx.Done():
			if err := parent.Err(); err != nil {
				return JobStatus{}, fmt.Errorf("dedup: wait for %s: %w", j.Key, err)
			}
			return st, nil
		case <-time.After(pause):
		}
		pause = min(2*pause, 250*time.Millisecond)
	}
}
