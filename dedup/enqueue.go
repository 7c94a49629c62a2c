package dedup

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup/internal/asynqwire"
	"github.com/onceq/onceq/dedup/internal/history"
	"github.com/onceq/onceq/dedup/storage"
)

// enqueueGuard checks and takes, in the same step as asynq's insert of one
// job's task: the job's record (a done one refuses the insert, even if its
// task was deleted), an existing task of the key it may replace, and the
// job's rule windows. It is an asynqwire.Guard; Ran stays false when the
// insert did not run behind it (an asynq the library did not verify).
type enqueueGuard struct {
	key     Key
	fp      string
	replace []string
	// cluster: on Redis Cluster the key's record and windows share the
	// task's slot only in its home queue (atHome); elsewhere only the task
	// is checked in the insert's step.
	cluster bool
	rules   []*Rule
	holder  string
	// successor: the insert runs under the successor policy; the job
	// waits at most this long for its key's run to end.
	successor time.Duration
	// replacesPending: under it, the job replaces a task not started.
	replacesPending bool
	// The history's side (recording), when the job keeps one.
	history        bool
	head, inserted string
	unique         time.Duration
	next           []string
	// incarnation is the one the task's headers carry.
	incarnation int
	// markDone: the done TTL the key's marks are expected under (0: none
	// expected; the guard's lookup works every one out).
	markDone time.Duration

	Ran bool
	// Found is what held the key when the guard refused the insert with
	// the key's record in its step; nil otherwise (then the producer reads it).
	Found *refusal
	// Throttled says which rule refused the job, Taken which windows the
	// insert took ('1') or found its holder had ('0').
	Throttled *throttle
	Taken     string
	// Waiting: the job waits as its key's successor (Displaced: in place
	// of another).
	Waiting, Displaced bool
	// Reincarnate, when not 0, refused the insert: the key was reset
	// (Producer.Reset), and its next job is this incarnation.
	Reincarnate int
}

// throttle is the rule window that refused a guarded insert.
type throttle struct {
	rule int // index in the job's rules
	storage.Reservation
}

// refusal is what a refused insert found, read in the same step.
type refusal struct {
	Task   *asynq.TaskInfo // nil: no task holds the key
	Record storage.Record  // StatusUnknown: none
	// other: a compact mark (Record.Compact) holds the key for other
	// content than the job's.
	other bool
}

// guardEnqueue returns a ctx for one insert of the job keyed k with
// fingerprint fp: an existing task of k in one of the states replace
// ("archived", "pending", "scheduled", "completed") is swapped for the new
// one atomically; any other refuses it, as asynq's task id does.
func guardEnqueue(ctx context.Context, k Key, fp string, cluster bool, replace ...string) (context.Context, *enqueueGuard) {
	g := &enqueueGuard{key: k, fp: fp, cluster: cluster, replace: replace}
	return asynqwire.WithGuard(ctx, g), g
}

// withRules has the insert take rules' windows for holder, checked before
// anything else: windows are then taken exactly when the task is inserted.
// Only where the windows share the task's slot (Producer.rulesAtHome).
func (g *enqueueGuard) withRules(rules []*Rule, holder string) {
	g.rules, g.holder = rules, holder
}

// recording has the insert record its decision about j's insert in in the
// key's history: the way in of ctx, the incarnation, and when a refusal is
// followed by another insert (the producer replaces the task: refused and
// replaceable), so that only the insert records.
func (g *enqueueGuard) recording(ctx context.Context, j Job, in insert) {
	g.unique, g.incarnation, g.history = j.Unique, in.incarnation, j.History
	if j.History { // else the guard names no history: no entry is built
		reason := ""
		if slices.Contains(in.replace, "pending") {
			reason = "replaced"
		}
		g.head, g.inserted = enqueueHead(ctx), history.Tail(string(Enqueued), in.incarnation, reason)
	}
	if in.last {
		return
	}
	g.next = []string{"completed"}
	if !j.KeepFailed {
		g.next = append(g.next, "archived")
	}
	switch j.Repeat.Policy {
	case repeatSuccessor:
		g.next = []string{"*"} // lua/successor.lua follows every refusal and records it
	case repeatDebounce:
		g.next = append(g.next, "pending", "scheduled")
	case repeatReplace:
		g.next = append(g.next, "~pending", "~scheduled")
	}
}

// Args are the guard's side of the insert of ins.
func (g *enqueueGuard) Args(ins asynqwire.Insert) (asynqwire.GuardArgs, error) {
	if ins.ID != g.key.TaskID() {
		return asynqwire.GuardArgs{}, fmt.Errorf("dedup: task %s inserted under the guard of %s", ins.ID, g.key)
	}
	a := asynqwire.GuardArgs{Fingerprint: g.fp, Replace: g.replace}
	if !atHome(g.cluster, ins.Queue, g.key) {
		return a, nil
	}
	a.Record, a.Holder = recordKey(g.key), g.holder
	a.Mark, a.Incarnation = incKey(g.key), g.incarnation
	// Whatever this process's store does, a worker's may leave marks.
	a.Marks, a.MarkID, a.MarkDone = markKey(g.key), markID(g.key), g.markDone
	a.Head, a.Inserted, a.HistoryTTL = g.head, g.inserted, g.unique
	none := noneKey(g.key)
	a.History = none
	if g.history {
		a.History = historyKey(g.key)
	}
	if g.successor > 0 {
		a.Successor = &asynqwire.Successor{Next: nextKey(g.key), Registry: successorsKey, Field: g.key.String(),
			TTL: g.successor, Pending: g.replacesPending}
		return a, nil
	}
	// Written with windows only; without them none's name stands in (one
	// slot on Cluster): one string fewer to build here and in the guard.
	a.WindowSet = none
	if len(g.rules) > 0 {
		a.WindowSet = windowsKey(g.key)
	}
	a.Next = g.next
	for _, r := range g.rules {
		a.Windows = append(a.Windows, asynqwire.Window{Key: windowKey(r.Key), TTL: r.Window,
			Repeats: r.Repeats, OutlastsKey: r.OutlastsKey})
	}
	return a, nil
}

// Result keeps what the insert's step decided.
func (g *enqueueGuard) Result(_ asynqwire.Insert, r asynqwire.InsertResult) {
	g.Ran, g.Taken, g.Reincarnate = true, r.Taken, r.Incarnation
	g.Waiting, g.Displaced = r.Waiting, r.Displaced
	if i := r.Throttled - 1; i >= 0 && i < len(g.rules) {
		g.Throttled = &throttle{rule: i, Reservation: storage.Reservation{Holder: r.Holder, RetryAfter: r.RetryAfter}}
	}
	if !r.Found {
		return
	}
	f := &refusal{Task: r.Task, Record: storage.Record{Key: g.key, State: StatusUnknown}}
	if m, ok := readMark(r.Record); ok {
		f.other = !m.same
	}
	if r.Record != "" {
		rec, err := recordOf(g.key, r.Record, r.RecordTTL)
		if err != nil {
			return // the producer reads the key again
		}
		f.Record = rec
	}
	g.Found = f
}
