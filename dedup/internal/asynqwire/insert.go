package asynqwire

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup/internal/mark"
)

// Guard is what the library checks and takes in the same step as asynq's
// insert of one job's task (lua/guard.lua): the job's record, an existing
// task it may replace, its rule windows.
type Guard interface {
	// Args are the guard's arguments for ins; an error refuses the insert
	// (a task that is not the guarded job's).
	Args(ins Insert) (GuardArgs, error)
	// Result is what the guard decided; asynq hears 1 when Inserted, else 0
	// (its task id conflict).
	Result(ins Insert, r InsertResult)
}

// Insert is asynq's insert of one task.
type Insert struct{ Queue, ID string }

// GuardArgs are the library's side of a guarded insert.
type GuardArgs struct {
	// Record is the job's record key: a done record refuses the insert, and
	// the task's hash keeps it with Fingerprint for the joined dequeue. ""
	// on Redis Cluster, where it sits in another slot.
	Record, Fingerprint string
	// Mark is the key's reset mark, read and deleted with Record: an insert
	// of an Incarnation below the one it holds is refused
	// (InsertResult.Incarnation), so a reset key's next life gets a new
	// downstream key. Incarnation is kept in the task's hash too, for the
	// worker's history.
	Mark        string
	Incarnation int
	// Replace are the task states an existing task of the job is replaced
	// from in the same step ("pending", "scheduled", "archived",
	// "completed"); otherwise it refuses the insert.
	Replace []string
	// History is the key's history (with a Record): the guard appends
	// its decision to it in its step (internal/history). Head starts each
	// entry; Inserted ends an insert's ("enqueued|<incarnation>|<reason>"),
	// which keeps the history HistoryTTL at least. A refusal is recorded
	// unless the existing task's state is in Next, from which the producer
	// replaces it (its insert records that): "pending" and "scheduled"
	// may be "~pending", "~scheduled", only for other content.
	History, Head, Inserted string
	HistoryTTL              time.Duration
	Next                    []string
	// Windows are taken for Holder in the insert's step, checked before
	// anything else (outside Cluster only, with a Record); the ones taken
	// are added to WindowSet, which lives as long as the longest of them.
	Holder    string
	WindowSet string
	Windows   []Window
	// Marks and MarkID are the key's compact mark (dedup/internal/mark),
	// with a Record: a live mark refuses the insert as a done record does,
	// and the task's hash keeps both for the joined dequeue. "": none.
	// MarkDone is the done TTL the producer expects its key's marks under
	// (its store's): the guard's lookup is handed their buckets
	// (internal/mark Lookup) and works out only those of another; 0: none.
	Marks, MarkID string
	MarkDone      time.Duration
	// Successor, when set, runs the insert under the successor policy
	// (lua/successor.lua) in place of the guard: with Record, outside
	// Cluster only.
	Successor *Successor
}

// Successor is where a job waits as its key's successor while the key's
// job runs, and for how long at most.
type Successor struct {
	Next     string // the key's successor hash
	Registry string // the successors hash the workers' sweep reads
	Field    string // the key's field in Registry: namespace/id
	TTL      time.Duration
	// Pending: the job replaces its key's task that has not started (and
	// has its incarnation); else it follows the key's run. A key found in
	// the other case refuses it: the producer built it for what it read.
	Pending bool
}

// Window is one rule window: its key, how long it holds, and whether a
// repeat of its own holder is refused too: always (Repeats), or once the
// job's key has forgotten it (OutlastsKey: no done record, no task but a
// completed one).
type Window struct {
	Key                  string
	TTL                  time.Duration
	Repeats, OutlastsKey bool
}

// InsertResult is what a guarded insert found and did.
type InsertResult struct {
	Inserted bool
	// Taken has a '1' per window the insert took ('0': its holder had it).
	Taken string
	// Throttled is the 1-based index of the window that refused the job, its
	// holder and how long it still holds; 0 when none did.
	Throttled  int
	Holder     string
	RetryAfter time.Duration
	// Waiting: the job waits as the successor of its key's running job;
	// Displaced: in place of another that waited.
	Waiting, Displaced bool
	// Incarnation, when not 0, refused the insert: the key was reset, and
	// its next insert must be of this incarnation or later.
	Incarnation int
	// Found: a refusal outside Cluster carries what holds the key: its task
	// (nil when none) and its record as stored ("" when none) with its TTL.
	Found     bool
	Task      *asynq.TaskInfo
	Record    string
	RecordTTL time.Duration
}

// ErrUnguarded is the error of an insert that asynq made under a Guard
// with a script the guard does not know: refused, never let through
// unguarded.
var ErrUnguarded = errors.New("dedup: asynq inserted a guarded task with a script the guard does not know: refused")

type guardKey struct{}

// WithGuard returns ctx for one asynq insert through a client Intercept
// watches: the insert runs behind g.
func WithGuard(ctx context.Context, g Guard) context.Context {
	return context.WithValue(ctx, guardKey{}, g)
}

// intercepted holds the clients Intercept has hooked, so that each gets
// its hook once.
var intercepted sync.Map // redis.UniversalClient -> struct{}

// Intercept hooks rdb (once) so that asynq's inserts under WithGuard run
// behind their Guard, however go-redis sends them: one command or in a
// pipeline or transaction. Every other command passes untouched.
func Intercept(rdb redis.UniversalClient) {
	if _, loaded := intercepted.LoadOrStore(rdb, struct{}{}); !loaded {
		rdb.AddHook(insertHook{})
	}
}

type insertHook struct{}

func (insertHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (insertHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		g, ok := ctx.Value(guardKey{}).(Guard)
		if !ok {
			return next(ctx, cmd)
		}
		call, ok := guardCall(cmd, g)
		switch {
		case !ok:
			return next(ctx, cmd)
		case call.err != nil:
			cmd.SetErr(call.err)
			return call.err
		}
		run := call.cmd(ctx, "evalsha")
		if err := next(ctx, run); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			run = call.cmd(ctx, "eval")
			_ = next(ctx, run)
		}
		return call.answer(cmd, run)
	}
}

func (insertHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		g, ok := ctx.Value(guardKey{}).(Guard)
		if !ok {
			return next(ctx, cmds)
		}
		// Guarded inserts go as EVAL in place (a pipeline cannot retry a
		// NOSCRIPT); refused ones leave the pipeline with their error.
		sent := make([]redis.Cmder, 0, len(cmds))
		type swap struct {
			orig, run redis.Cmder
			call      insertCall
		}
		var swaps []swap
		for _, cmd := range cmds {
			call, ok := guardCall(cmd, g)
			switch {
			case !ok:
				sent = append(sent, cmd)
			case call.err != nil:
				cmd.SetErr(call.err)
			default:
				run := call.cmd(ctx, "eval")
				swaps = append(swaps, swap{cmd, run, call})
				sent = append(sent, run)
			}
		}
		var err error
		if slices.ContainsFunc(sent, func(c redis.Cmder) bool { return c.Name() != "multi" && c.Name() != "exec" }) {
			err = next(ctx, sent) // else nothing is left to send (go-redis needs a command)
		}
		for _, s := range swaps {
			if aerr := s.call.answer(s.orig, s.run); aerr != nil && err == nil {
				err = aerr
			}
		}
		return err
	}
}

// scriptSHA is the SHA-1 of the script an EVALSHA or EVAL runs.
func scriptSHA(cmd redis.Cmder) string {
	args := cmd.Args()
	if len(args) < 2 {
		return ""
	}
	s, _ := args[1].(string)
	if cmd.Name() == "evalsha" || cmd.Name() == "evalsha_ro" {
		return s
	}
	sum := sha1.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

// scriptCall splits an EVAL or EVALSHA into its keys and arguments, as
// the command's own values (boxed once, by asynq's call).
func scriptCall(cmd redis.Cmder) (keys, args []any, ok bool) {
	a := cmd.Args()
	if len(a) < 3 {
		return nil, nil, false
	}
	var n int
	switch v := a[2].(type) {
	case int:
		n = v
	case int64:
		n = int(v)
	case string:
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			return nil, nil, false
		}
	default:
		return nil, nil, false
	}
	if n < 0 || 3+n > len(a) {
		return nil, nil, false
	}
	for _, k := range a[3 : 3+n] {
		if _, ok := k.(string); !ok {
			return nil, nil, false
		}
	}
	return a[3 : 3+n], a[3+n:], true
}

// insertCall is a guarded insert, ready to run.
type insertCall struct {
	ins    Insert
	g      Guard
	script *redis.Script
	// call is the whole command but its first two values (the command's
	// name and the script's SHA-1 or source, set per send): built once,
	// with asynq's own values as asynq boxed them.
	call []any
	err  error // refused before running
	// successor: lua/successor.lua's call, whose 2 and 3 say the job waits
	successor bool
}

// guardCall recognises asynq's insert in cmd and builds its guarded call;
// false when cmd is no insert of a task.
func guardCall(cmd redis.Cmder, g Guard) (insertCall, bool) {
	if name := cmd.Name(); name != "evalsha" && name != "eval" {
		return insertCall{}, false
	}
	sha := scriptSHA(cmd)
	if guardSHAs[sha] {
		return insertCall{}, false // the guard's own call
	}
	keys, args, ok := scriptCall(cmd)
	if !ok || len(keys) == 0 {
		return insertCall{}, false
	}
	queue, id, isTask := ParseTaskKey(keys[0].(string))
	if !isTask {
		return insertCall{}, false
	}
	c := insertCall{ins: Insert{Queue: queue, ID: id}, g: g, script: guards[sha]}
	if c.script == nil || len(keys) != 2 || len(args) != 3 {
		c.err = ErrUnguarded
		return c, true
	}
	ga, err := g.Args(c.ins)
	if err != nil {
		c.err = err
		return c, true
	}
	if sc := ga.Successor; sc != nil && ga.Record != "" {
		// lua/successor.lua's layout
		c.script = successors[sha]
		sk := boxedStateKeys(queue)
		after := "after"
		if sc.Pending {
			after = "pending"
		}
		c.call = []any{nil, nil, 10, keys[0], keys[1], sk[0], sk[1], sk[2], sk[3], ga.Record, sc.Next, sc.Registry, ga.History,
			args[0], args[1], args[2], id, ga.Fingerprint, max(sc.TTL.Milliseconds(), 1), queue, sc.Field,
			ga.Head, max(ga.Incarnation, 1), after}
		c.successor = true
		return c, true
	}
	// lua/guard.lua's layout: asynq's KEYS and ARGV first.
	nk := 2
	if ga.Record != "" {
		nk = 7 + len(ga.Windows)
	}
	c.call = make([]any, 0, 3+nk+18+2*len(ga.Windows))
	c.call = append(c.call, nil, nil, nk, keys[0], keys[1])
	if ga.Record != "" {
		c.call = append(c.call, ga.Record, ga.History, ga.Mark, ga.WindowSet, ga.Marks)
		for _, w := range ga.Windows {
			c.call = append(c.call, w.Key)
		}
	}
	c.call = append(c.call, args[0], args[1], args[2], id, states(ga.Replace), ga.Fingerprint)
	if ga.Record != "" {
		now := time.Now()
		var h mark.Hint
		if ga.MarkID != "" && ga.MarkDone > 0 {
			h = mark.Lookup(ga.Marks, ga.MarkID, now, ga.MarkDone)
		}
		c.call = append(c.call, ga.Head, ga.Inserted, max(ga.HistoryTTL.Milliseconds(), 1), states(ga.Next), max(ga.Incarnation, 1),
			ga.MarkID, now.UnixMilli(), ga.Holder, h.Done, h.Buckets[0], h.Buckets[1], h.Buckets[2])
		for _, w := range ga.Windows {
			rep := "0"
			if w.Repeats {
				rep = "1"
			} else if w.OutlastsKey {
				rep = "2"
			}
			c.call = append(c.call, w.TTL.Milliseconds(), rep)
		}
	}
	return c, true
}

// states is a list of states as the guard reads it: comma delimited on
// both ends, "" for none.
func states(s []string) string {
	if len(s) == 0 {
		return ""
	}
	n := len(s) + 1
	for _, x := range s {
		n += len(x)
	}
	var b strings.Builder
	b.Grow(n)
	for _, x := range s {
		b.WriteByte(',')
		b.WriteString(x)
	}
	b.WriteByte(',')
	return b.String()
}

// cmd is the call as a command of name ("evalsha" or "eval").
func (c insertCall) cmd(ctx context.Context, name string) *redis.Cmd {
	first := c.script.Hash()
	a := c.call
	if name == "eval" {
		first = wrappedSource[first]
		a = slices.Clone(a) // the first command may still be read
	}
	a[0], a[1] = name, first
	return redis.NewCmd(ctx, a...)
}

// answer reads the guard's reply in run, tells the Guard, and gives asynq's
// command orig the reply asynq's own script would have: 1 inserted, 0
// refused (its task id conflict).
func (c insertCall) answer(orig, run redis.Cmder) error {
	out, _ := orig.(*redis.Cmd)
	if err := run.Err(); err != nil { // a hook may fail a reply that came (WAIT): keep its error
		orig.SetErr(err)
		return err
	}
	v := run.(*redis.Cmd).Val()
	var r InsertResult
	var err error
	if n, ok := v.(int64); ok && c.successor && n >= 2 {
		r = InsertResult{Waiting: true, Displaced: n == 3}
	} else {
		r, err = insertResult(c.ins, v)
	}
	if err != nil {
		orig.SetErr(err)
		return err
	}
	c.g.Result(c.ins, r)
	if out != nil {
		if r.Inserted || r.Waiting { // asynq returns its TaskInfo; the guard knows better
			out.SetVal(int64(1))
		} else {
			out.SetVal(int64(0))
		}
	}
	return nil
}

// insertResult reads lua/guard.lua's reply.
func insertResult(ins Insert, v any) (InsertResult, error) {
	var r InsertResult
	str := func(a []any, i int) string { s, _ := a[i].(string); return s }
	switch a := v.(type) {
	case int64:
		r.Inserted = a == 1
	case []any:
		switch len(a) {
		case 2: // inserted, with windows; or {-2, n}: a reset left incarnation n
			if n, ok := a[0].(int64); ok && n == -2 {
				inc, _ := a[1].(int64)
				r.Incarnation = int(inc)
				break
			}
			r.Inserted, r.Taken = true, str(a, 1)
		case 4: // {-1, i, holder, pttl}: a window refused it
			i, _ := a[1].(int64)
			pttl, _ := a[3].(int64)
			r.Throttled, r.Holder, r.RetryAfter = int(i), str(a, 2), time.Duration(max(pttl, 0))*time.Millisecond
		case 6: // {0, msg, state, result, record, pttl}: refused, with what holds the key
			r.Found = true
			if msg := str(a, 1); msg != "" {
				info, err := TaskInfo(ins.Queue, ins.ID, []byte(msg), str(a, 2), []byte(str(a, 3)))
				if err != nil {
					return r, err
				}
				r.Task = info
			}
			r.Record = str(a, 4)
			pttl, _ := a[5].(int64)
			r.RecordTTL = time.Duration(pttl) * time.Millisecond
		default:
			return r, fmt.Errorf("dedup: guarded insert replied %v", v)
		}
	default:
		return r, fmt.Errorf("dedup: guarded insert replied %v", v)
	}
	return r, nil
}
