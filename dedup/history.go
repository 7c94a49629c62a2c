package dedup

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup/internal/history"
)

// A key's history: its last decisions, newest first, each appended by the
// script that made it (no round trip of its own), kept as long as the key
// is remembered. The layout and the Lua that appends are internal/history's.

// The ways in the library names itself.
const (
	sourceLibrary = "library" // an enqueue whose ctx names none (WithSource)
	sourceWorker  = "worker"  // a worker's claims and ends of runs
)

type sourceKey struct{}

// WithSource returns ctx for enqueues made on behalf of source, the way in
// that the key's history names with each decision ("cli", "batch",
// "http:alice", "webhook:stripe"). Default: "library". At most 64 bytes
// are kept; '|' and line breaks become spaces.
func WithSource(ctx context.Context, source string) context.Context {
	return context.WithValue(ctx, sourceKey{}, source)
}

func sourceOf(ctx context.Context) string {
	if s, ok := ctx.Value(sourceKey{}).(string); ok && s != "" {
		return s
	}
	return sourceLibrary
}

// HistoryEntry is one decision in a key's history (Producer.History).
type HistoryEntry struct {
	At time.Time `json:"at"`
	// Source is the way in: what WithSource named for an enqueue
	// ("library" by default), "worker" for a claim or an end of a run.
	Source string `json:"source"`
	// Decision is enqueued, duplicate, conflict or throttled for an
	// enqueue; acquired (a run started: its entry leaves when the key is
	// done), completed or released (the run failed) on the worker.
	Decision Decision `json:"decision"`
	// Reason is short: the state a duplicate met, the window's holder that
	// throttled, "replaced" for a job that took a pending one's place, a
	// failed run's cause.
	Reason string `json:"reason,omitempty"`
	// TaskID is the asynq task the decision was about.
	TaskID string `json:"task_id"`
	// Incarnation is the life of the key (0 when not known).
	Incarnation int `json:"incarnation,omitempty"`
}

// History returns k's history, newest first: at most the last 32
// decisions, kept while the key is remembered (its job's unique window, or
// its done record's TTL once done; a done key keeps no entries of its
// claims). Empty for a key with none. The Producer's enqueues are recorded
// when its Store is the Redis one on its client, a worker's when its Store
// is the Redis one; a refusal that
// the Producer follows with a replacement is recorded as that insert.
func (p *Producer) History(ctx context.Context, k Key) ([]HistoryEntry, error) {
	v, err := p.rdb.Get(ctx, historyKey(k)).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("onceq: history %q: %w", k.String(), err)
	}
	es, err := history.Parse(v)
	out := make([]HistoryEntry, 0, len(es))
	for _, e := range es {
		h := HistoryEntry{At: e.At, Source: e.Way, Decision: Decision(e.Decision), Reason: e.Reason,
			TaskID: e.TaskID, Incarnation: e.Incarnation}
		if h.TaskID == "" {
			h.TaskID = k.TaskID()
		}
		if h.Decision == Duplicate {
			h.Reason = stateWord(h.Reason)
		}
		out = append(out, h)
	}
	if err != nil {
		return out, fmt.Errorf("onceq: history %q: %w", k.String(), err)
	}
	return out, nil
}

// stateWord is the Status of the asynq state word the guard writes for the
// task a duplicate met.
func stateWord(s string) string {
	switch s {
	case "active":
		return string(StatusRunning)
	case "completed":
		return string(StatusDone)
	case "aggregating":
		return string(StatusPending)
	}
	return s
}

// enqueueHead starts the history entries of one enqueue of k.
func enqueueHead(ctx context.Context) string {
	return history.Head(time.Now(), sourceOf(ctx), "")
}

// workerEntry is the history entry of a worker's decision d about k, for
// the run in ctx (its task and incarnation, when ctx carries them).
func workerEntry(ctx context.Context, k Key, d Decision, reason string) string {
	e := history.Entry{At: time.Now(), Way: sourceWorker, Decision: string(d), Reason: reason}
	if id, ok := asynq.GetTaskID(ctx); ok && id != k.TaskID() {
		e.TaskID = id
	}
	if r, ok := RunFromContext(ctx); ok && r.Key == k {
		e.Incarnation = r.Incarnation
	}
	return e.Pack()
}
