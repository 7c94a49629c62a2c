package dedup

// This file is onceq's only coupling to asynq's internals: the client a
// Producer gives asynq recognises asynq v0.26.0's enqueue and schedule
// scripts (by the SHA-1 asynq sends) and, for an enqueue the producer
// guarded, runs lua/enqueue.lua ahead of asynq's script in one call.
// enqueue_test.go pins the scripts to go.mod's asynq version.

import (
	"context"
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// guardAsynqVersion is the asynq release whose enqueue was checked: its
// client inserts a task with one EVALSHA of enqueueCmd or scheduleCmd
// (internal/rdb/rdb.go), KEYS[1] = asynq:{<queue>}:t:<id>.
const guardAsynqVersion = "v0.26.0"

// lua/asynq holds asynq v0.26.0's enqueueCmd and scheduleCmd byte for byte:
// they are found by the SHA-1 asynq sends, so only an identical script is
// ever guarded.
//
//go:embed lua/asynq/*.lua
var asynqLua embed.FS

// asynqScript is asynq's script lua/asynq/<name> and the SHA-1 asynq sends
// for it.
func asynqScript(name string) (src, sha string) {
	b, err := asynqLua.ReadFile("lua/asynq/" + name)
	if err != nil {
		panic(err)
	}
	sum := sha1.Sum(b)
	return string(b), hex.EncodeToString(sum[:])
}

// guardScripts maps the SHA-1 of asynq's enqueueCmd and scheduleCmd to the
// guard followed by that script, unchanged.
var guardScripts = func() map[string]*redis.Script {
	out := map[string]*redis.Script{}
	for _, name := range []string{"enqueue.lua", "schedule.lua"} {
		src, sha := asynqScript(name)
		out[sha] = redis.NewScript("local function asynq_insert()" + src + "end\n" + luaSource("enqueue.lua"))
	}
	return out
}()

// enqueueGuard is what the guard of one enqueue found. Ran is false when
// asynq did not send a script the guard knows (another asynq version, or a
// client not from guardEnqueues): then nothing was checked or replaced.
type enqueueGuard struct {
	key     Key
	fp      string
	replace string
	Ran     bool
	// Found is what held the key when the guard refused the enqueue
	// outside Cluster; nil otherwise (then the producer reads it).
	Found *refusal
	// rules are taken in the insert's step (withRules): Throttled says
	// which refused the job, Taken which windows the insert took.
	rules     []*Rule
	holder    string
	Throttled *throttle
	Taken     string
}

// throttle is the rule window that refused a guarded enqueue.
type throttle struct {
	rule int // index in the job's rules
	Reservation
}

// withRules has the guard take rules' windows for holder in the same step
// as the insert, checked before anything else: windows are then taken
// exactly when the task is inserted. Only outside Cluster, where the
// windows share a node with asynq's keys.
func (g *enqueueGuard) withRules(rules []*Rule, holder string) {
	g.rules, g.holder = rules, holder
}

// refusal is what a refused enqueue found, read in the same script.
type refusal struct {
	Task   *asynq.TaskInfo // nil: no task holds the key
	Record Record          // StatusUnknown: none
}

type guardKey struct{}

// guardEnqueue returns a ctx for one asynq enqueue of the job keyed k
// through a guardEnqueues client: it is refused while k's record is done,
// even if its task was deleted (not on Cluster, where the record sits in
// another slot), and an existing task of k in one of the asynq states
// replace ("archived", "pending", "scheduled", "completed") is swapped for
// the new one atomically. Any other existing task refuses it, as asynq's task id does.
// Outside Cluster the task's hash keeps k's record key and fingerprint fp,
// for the worker's joined dequeue (join.go).
func guardEnqueue(ctx context.Context, k Key, fp string, replace ...string) (context.Context, *enqueueGuard) {
	g := &enqueueGuard{key: k, fp: fp}
	if len(replace) > 0 {
		g.replace = "," + strings.Join(replace, ",") + ","
	}
	return context.WithValue(ctx, guardKey{}, g), g
}

// guardEnqueues returns the client to give asynq.NewClientFromRedisClient
// so that enqueues under guardEnqueue are guarded; every other call passes
// through to rdb unchanged.
func guardEnqueues(rdb redis.UniversalClient) redis.UniversalClient {
	_, cluster := rdb.(*redis.ClusterClient)
	return guardingClient{UniversalClient: rdb, cluster: cluster}
}

type guardingClient struct {
	redis.UniversalClient
	cluster bool
}

// EvalSha is the only call asynq makes for an insert (Eval follows only a
// NOSCRIPT, which the guard's own Run absorbs).
func (c guardingClient) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	g, _ := ctx.Value(guardKey{}).(*enqueueGuard)
	script, ok := guardScripts[sha]
	if g == nil || !ok || len(keys) != 2 || len(args) != 3 {
		return c.UniversalClient.EvalSha(ctx, sha, keys, args...)
	}
	// asynq:{<queue>}:t:<id>; a queue name holds no '}'.
	base, id, found := strings.Cut(keys[0], "}:t:")
	if !found {
		return c.UniversalClient.EvalSha(ctx, sha, keys, args...)
	}
	queue := strings.TrimPrefix(base, "asynq:{")
	ks := make([]string, 0, 7+len(g.rules))
	ks = append(ks, keys[0], keys[1])
	ks = append(ks, stateKeys(queue)[:]...)
	argv := make([]any, 0, 7+2*len(g.rules))
	argv = append(argv, args[0], args[1], args[2], id, g.replace, g.fp)
	if !c.cluster {
		ks = append(ks, recordKey(g.key))
		if len(g.rules) > 0 {
			argv = append(argv, g.holder)
			for _, r := range g.rules {
				ks = append(ks, windowKey(r.Key))
				argv = append(argv, r.Window.Milliseconds(), r.Repeats)
			}
		}
	}
	g.Ran = true
	cmd := script.Run(ctx, c.UniversalClient, ks, argv...)
	if cmd.Err() != nil { // a hook may fail a reply that came (WAIT): keep its error
		return cmd
	}
	v, ok := cmd.Val().([]any)
	out := redis.NewCmd(ctx)
	switch {
	case ok && len(v) == 2: // inserted, with rules
		g.Taken, _ = v[1].(string)
		out.SetVal(v[0])
		return out
	case ok && len(v) == 4: // a window refused it: asynq hears its 0
		i, _ := v[1].(int64)
		h, _ := v[2].(string)
		pttl, _ := v[3].(int64)
		if i >= 1 && int(i) <= len(g.rules) {
			g.Throttled = &throttle{rule: int(i) - 1,
				Reservation: Reservation{Holder: h, RetryAfter: time.Duration(max(pttl, 0)) * time.Millisecond}}
		}
		out.SetVal(int64(0))
		return out
	case !ok || len(v) != 6:
		return cmd
	}
	// Refused, with what holds the key: asynq hears its 0.
	if f, err := refusalOf(g.key, queue, id, v); err == nil {
		g.Found = f
	}
	out.SetVal(int64(0))
	return out
}

// queueStateKeys caches, per queue, the keys of the four asynq states a
// guarded insert may find or replace its task in: every enqueue needs them.
// One entry per queue the producer enqueues to (the catalog's queues and
// shards), never removed.
var queueStateKeys sync.Map // queue -> *[4]string

// stateKeys are queue's pending, scheduled, archived and completed keys.
func stateKeys(queue string) *[4]string {
	if ks, ok := queueStateKeys.Load(queue); ok {
		return ks.(*[4]string)
	}
	base := "asynq:{" + queue + "}:"
	ks, _ := queueStateKeys.LoadOrStore(queue, &[4]string{base + "pending", base + "scheduled", base + "archived", base + "completed"})
	return ks.(*[4]string)
}

// refusalOf reads the guard's refusal {0, msg, state, result, record, pttl}.
func refusalOf(k Key, queue, id string, v []any) (*refusal, error) {
	str := func(i int) string { s, _ := v[i].(string); return s }
	f := &refusal{Record: Record{Key: k, State: StatusUnknown}}
	if msg := str(1); msg != "" {
		info, err := taskInfoOf(queue, id, []byte(msg), str(2), []byte(str(3)))
		if err != nil {
			return nil, err
		}
		f.Task = info
	}
	if rec := str(4); rec != "" {
		pttl, _ := v[5].(int64)
		r, err := recordOf(k, rec, time.Duration(pttl)*time.Millisecond)
		if err != nil {
			return nil, err
		}
		f.Record = r
	}
	return f, nil
}
