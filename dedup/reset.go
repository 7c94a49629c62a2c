package dedup

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup/internal/asynqwire"
	"github.com/onceq/onceq/dedup/internal/history"
	"github.com/onceq/onceq/dedup/storage"
)

// ErrRunning is returned by Reset when the key's job is running (a worker
// holds it) and the caller did not let it finish unrecorded: nothing was
// changed.
var ErrRunning = errors.New("onceq: the key's job is running")

// Reset frees k at once, for an operator who must let its job run again
// before its window ends. In one atomic step (one Lua call; on Redis
// Cluster too, its task being in its key's home queue) its record, its successor, the rule windows its job took and
// still holds, and its task in any state but running go; a pending,
// scheduled or retrying job is cancelled with it. The key's next job is a
// new incarnation with a new downstream key (key#n): a gateway that cached
// the reset job's answer does not replay it. That number is left in a
// small mark that the next insert of the key reads and deletes (TTL: the
// default unique window, 24 h).
//
// A running job refuses the reset with ErrRunning, unless finishRunning:
// then its record goes with the rest and its task stays for asynq to
// acknowledge. The run is cancelled at its next heartbeat, as any run
// whose lease is lost, and whatever it returns records nothing (its
// completion is refused as a lost lease); if it fails, asynq retries its
// task as a new claim of the free key. Until that run ends, a repeat of
// the key is its duplicate: never two runs of a key at once.
//
// It returns what the key was before (JobStatus.Known false: nothing was
// there, and nothing changed). The Observer hears op "reset", outcome
// "reset". For a task outside its key's home queue on Cluster (another
// slot), the record, successor, windows and mark go in one call and the
// task in another (asynq's Inspector).
// With a Store other than the Redis one on the Producer's client, the
// record goes through Store.Forget.
func (p *Producer) Reset(ctx context.Context, k Key, finishRunning bool) (JobStatus, error) {
	before, err := p.Status(ctx, k)
	if err != nil {
		return JobStatus{}, fmt.Errorf("onceq: reset %s: %w", k, err)
	}
	a := asynqwire.ResetArgs{Record: recordKey(k), Next: nextKey(k), WindowSet: windowsKey(k), Mark: incKey(k),
		History: historyKey(k), Holder: k.String(), LetFinish: finishRunning, Incarnation: before.Incarnation + 1, MarkTTL: defaultUnique,
		Entry: history.Entry{At: time.Now(), Way: sourceOf(ctx), Decision: string(storage.Reset), Incarnation: before.Incarnation,
			Reason: "was " + string(before.State)}.Pack()}
	a.Marks, a.MarkID = markKey(k), markID(k)
	queue := ""
	if before.Queue != nil {
		queue = *before.Queue
	}
	atomic := p.folded.Load() != nil && (queue == "" || atHome(p.cluster, queue, k))
	if atomic {
		a.Queue, a.ID = queue, k.TaskID()
	} else if before.State == StatusRunning && !finishRunning {
		p.observeReset(ctx, k, outcomeInProgress, "refused: its job is running")
		return before, fmt.Errorf("onceq: reset %s: %w", k, ErrRunning)
	}
	r, err := asynqwire.Reset(ctx, p.rdb, a)
	if err != nil {
		return JobStatus{}, fmt.Errorf("onceq: reset %s: %w", k, err)
	}
	if r.Running && !finishRunning {
		p.observeReset(ctx, k, outcomeInProgress, "refused: its job is running")
		return before, fmt.Errorf("onceq: reset %s: %w", k, ErrRunning)
	}
	if !atomic {
		if _, ok := p.store.(*redisStore); !ok {
			if err := p.store.Forget(ctx, k); err != nil {
				return JobStatus{}, fmt.Errorf("onceq: reset %s: %w", k, err)
			}
		}
		if queue != "" && before.TaskState != nil && *before.TaskState != asynq.TaskStateActive.String() {
			if err := p.insp.DeleteTask(queue, k.TaskID()); err != nil && !errors.Is(err, asynq.ErrTaskNotFound) {
				return JobStatus{}, fmt.Errorf("onceq: reset %s: task: %w", k, err)
			}
		}
	}
	if !r.Found && !before.Known {
		return before, nil
	}
	before.Known = true
	reason := fmt.Sprintf("freed by an operator (was %s); next incarnation %d", before.State, a.Incarnation)
	if r.Running {
		reason += "; its running job finishes unrecorded"
	}
	p.observeReset(ctx, k, outcomeReset, reason)
	return before, nil
}

func (p *Producer) observeReset(ctx context.Context, k Key, o Decision, reason string) {
	p.opts.Observer(ctx, Event{Op: opReset, Key: k, Outcome: o, Reason: reason})
}
