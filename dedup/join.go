package dedup

// This file, lua/dequeue.lua and lua/ack.lua are the worker's coupling to
// asynq v0.26.0 (guardAsynqVersion). The client a Server gives asynq
// recognises asynq's dequeue script and its four acknowledgement scripts by
// the SHA-1 asynq sends, and runs onceq's claim with the dequeue, and its
// completion before the acknowledgement, in the same call: two round trips
// per task, as bare asynq. Whatever it does not recognise passes through
// unchanged, and the middleware makes its own calls. join_test.go pins the
// scripts to go.mod's asynq version and tests the fallback.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup/internal/storerule"
)

// joinScripts maps the SHA-1 of each named asynq script to one script:
// asynq's, unchanged, as the local function fn, then lua/<tail>, which
// calls it. prelude goes first.
func joinScripts(prelude, fn, tail string, names ...string) map[string]*redis.Script {
	out := map[string]*redis.Script{}
	for _, name := range names {
		src, sha := asynqScript(name)
		out[sha] = redis.NewScript(prelude + "local function " + fn + "()\n" + src + "\nend\n" + luaSource(tail))
	}
	return out
}

var (
	// lua/dequeue.lua is asynq's dequeue written out with the claim: it
	// stands in for asynq's script whole.
	dequeueJoins = func() map[string]*redis.Script {
		_, sha := asynqScript("dequeue.lua")
		return map[string]*redis.Script{sha: redis.NewScript(luaSource("dequeue.lua"))}
	}()
	ackJoins = func() map[string]*redis.Script {
		// kept: asynq keeps the task's hash (mark-as-complete), so onceq's
		// fields leave it; done deletes it.
		prelude := "local function finish(KEYS, ARGV)\n" + luaSource("finish.lua") + "\nend\n"
		m := joinScripts(prelude+"local kept = false\n", "asynq_ack", "ack.lua", "done.lua", "done-unique.lua")
		maps.Copy(m, joinScripts(prelude+"local kept = true\n", "asynq_ack", "ack.lua", "mark-as-complete.lua", "mark-as-complete-unique.lua"))
		return m
	}()
)

// How long a completion waits for asynq's acknowledgement before it is
// recorded alone (asynq skips the acknowledgement when its own lease is
// gone or the task's deadline passed as the handler returned), and how long
// a claim the dequeue made waits for its delivery before it is released.
const (
	parkWait  = time.Second
	claimWait = 10 * time.Second
	sweepTick = 250 * time.Millisecond
)

// joiner carries claims from asynq's dequeue to the middleware, and
// completions from the middleware to asynq's acknowledgement, inside one
// process. Entries are keyed by queue and task id and live for seconds.
type joiner struct {
	m        *Middleware
	store    *RedisStore
	dequeues map[string]*redis.Script // dequeueJoins; tests empty it
	acks     map[string]*redis.Script // ackJoins; tests empty it
	off      atomic.Bool
	// claimArgs are lua/dequeue.lua's constant arguments: owner prefix,
	// the record's TTL (lease and grace) and grace in ms.
	claimArgs [3]string

	mu     sync.Mutex
	claims map[taskRef]joinedClaim // dequeued, not yet delivered
	parked map[taskRef]*parked     // handler done, waiting for asynq's acknowledgement
	stop   chan struct{}
	done   chan struct{}
}

type joinedClaim struct {
	rec, fp  string // the record key and fingerprint the producer wrote
	acquired bool
	hold     Hold   // acquired; Key still empty
	old      string // not acquired: the record found
	at       time.Time
}

// held is the hold an acquired claim gives, its key read back from the
// record key; false when the dequeue acquired nothing.
func (c joinedClaim) held() (Hold, bool) {
	k, err := keyOfRecord(c.rec)
	if !c.acquired || err != nil {
		return Hold{}, false
	}
	h := c.hold
	h.Key = k
	return h, true
}

type parked struct {
	h      Hold
	result []byte
	ttl    time.Duration
	sink   *resultSink
	at     time.Time
}

// joining returns the client to give asynq for a Server on rdb and store,
// and wires m to it; rdb itself when the join cannot apply.
func joining(rdb redis.UniversalClient, store Store, m *Middleware) redis.UniversalClient {
	s, ok := store.(*RedisStore)
	if !ok || s.rdb != rdb {
		return rdb // another store: nothing of it rides asynq's scripts
	}
	if _, cluster := rdb.(*redis.ClusterClient); cluster {
		m.opts.Observer(context.Background(), Event{Op: opJoin, Outcome: outcomeOff,
			Reason: "on Redis Cluster a record is in its key's slot, not its queue's: claims and completions go as calls of their own"})
		return rdb
	}
	j := &joiner{m: m, store: s, dequeues: dequeueJoins, acks: ackJoins, claims: map[taskRef]joinedClaim{}, parked: map[taskRef]*parked{},
		stop: make(chan struct{}), done: make(chan struct{})}
	j.claimArgs = [3]string{bootOwner + "/", strconv.FormatInt((m.opts.Lease + s.opts.FailedTTL).Milliseconds(), 10),
		strconv.FormatInt(s.opts.FailedTTL.Milliseconds(), 10)}
	m.join = j
	go j.sweep()
	return joiningClient{UniversalClient: rdb, j: j}
}

type joiningClient struct {
	redis.UniversalClient
	j *joiner
}

// EvalSha is how asynq runs every script (Script.Run; EVAL follows only a
// NOSCRIPT, and the joined scripts' own Run absorbs that).
func (c joiningClient) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	j := c.j
	if len(keys) == 4 && len(args) == 2 && strings.HasSuffix(keys[1], "}:paused") {
		if s := j.dequeues[sha]; s != nil && !j.off.Load() {
			return j.dequeue(ctx, sha, s, keys, args)
		}
		if j.dequeues[sha] == nil && j.off.CompareAndSwap(false, true) {
			j.m.opts.Observer(ctx, Event{Op: opJoin, Outcome: outcomeError,
				Reason: "asynq's dequeue script is not " + guardAsynqVersion + "'s: claims and completions go as calls of their own"})
		}
	}
	if p := j.acked(keys, args); p != nil {
		if s := j.acks[sha]; s != nil {
			return j.ack(ctx, sha, s, p, keys, args)
		}
		j.record(p, j.m.complete(ctx, p.h, p.result, p.ttl)) // an acknowledgement onceq does not know
	}
	return c.UniversalClient.EvalSha(ctx, sha, keys, args...)
}

// taskRef names a task of the join's maps: a struct, so that no lookup
// builds a string.
type taskRef struct{ queue, id string }

func taskName(queue, id string) taskRef { return taskRef{queue, id} }

// dequeue runs asynq's dequeue and onceq's claim of the task it pops.
func (j *joiner) dequeue(ctx context.Context, sha string, s *redis.Script, keys []string, args []any) *redis.Cmd {
	out := redis.NewCmd(ctx)
	at := time.Now()
	tok := nextToken()
	v, err := s.Run(ctx, j.store.rdb, keys, args[0], args[1], j.claimArgs[0], tok, at.UnixMilli(),
		j.claimArgs[1], j.claimArgs[2]).Result()
	var rerr redis.Error
	if errors.As(err, &rerr) && !errors.Is(err, redis.Nil) && strings.Contains(err.Error(), "script") {
		// This Redis cannot run the joined script: go on without it.
		if j.off.CompareAndSwap(false, true) {
			j.m.opts.Observer(ctx, Event{Op: opJoin, Outcome: outcomeError,
				Reason: "the joined dequeue failed (" + err.Error() + "): claims and completions go as calls of their own"})
		}
		return j.store.rdb.EvalSha(ctx, sha, keys, args...) // asynq's own; NOSCRIPT brings asynq's EVAL
	}
	if err != nil {
		out.SetErr(err) // redis.Nil: the queue is empty
		return out
	}
	switch r := v.(type) {
	case string:
		out.SetVal(r) // not a guarded task: the middleware claims
	case []any:
		msg, _ := r[0].(string)
		id, _ := r[1].(string)
		flag, _ := r[2].(int64)
		rec, _ := r[3].(string)
		x, _ := r[4].(string)
		q := strings.TrimSuffix(strings.TrimPrefix(keys[0], "asynq:{"), "}:pending")
		c := joinedClaim{rec: rec, at: at, acquired: flag == 1}
		if c.acquired {
			c.fp, c.hold = x, Hold{Token: tok, Owner: bootOwner + "/" + strings.ReplaceAll(id, "|", "_")}
		} else {
			c.old = x
		}
		j.mu.Lock()
		j.claims[taskName(q, id)] = c
		j.mu.Unlock()
		out.SetVal(msg)
	default:
		out.SetErr(fmt.Errorf("onceq: joined dequeue replied %v", v))
	}
	return out
}

// claimed answers the delivery in ctx of key k from the claim its dequeue
// made; false when there is none, or it does not settle the delivery (a
// running or failed record): the middleware claims itself then.
func (j *joiner) claimed(ctx context.Context, k Key, fp string) (Claim, bool) {
	if j == nil {
		return Claim{}, false
	}
	q, _ := asynq.GetQueueName(ctx)
	id, ok := asynq.GetTaskID(ctx)
	if !ok {
		return Claim{}, false
	}
	name := taskName(q, id)
	j.mu.Lock()
	c, ok := j.claims[name]
	delete(j.claims, name)
	j.mu.Unlock()
	if !ok {
		return Claim{}, false
	}
	h := c.hold
	h.Key = k
	if same := c.rec == recordKey(k); !same || (c.acquired && c.fp != fp) {
		// The worker keys this task otherwise than its producer did.
		if c.acquired && same {
			_ = j.store.Release(ctx, h, "keyed otherwise by the worker")
		}
		return Claim{}, false
	}
	if c.acquired {
		cl := Claim{Outcome: Acquired, Hold: h, Attempt: 1, LeaseUntil: c.at.Add(j.m.opts.Lease)}
		j.store.report(ctx, k, cl)
		return cl, true
	}
	cl, err := j.store.decide(k, fp, c.old, -1)
	if err != nil || (cl.Outcome != Duplicate && cl.Outcome != Conflict) {
		return Claim{}, false
	}
	j.store.report(ctx, k, cl)
	return cl, true
}

// park hands the completion of the run of h to asynq's acknowledgement of
// the task in ctx; false when it must be recorded now.
func (j *joiner) park(ctx context.Context, h Hold, result []byte, ttl time.Duration, sink *resultSink) bool {
	if j == nil || j.off.Load() || len(result) > j.store.opts.MaxResultBytes {
		return false
	}
	q, _ := asynq.GetQueueName(ctx)
	id, ok := asynq.GetTaskID(ctx)
	if !ok {
		return false
	}
	j.parkAs(taskName(q, id), h, result, ttl, sink)
	return true
}

func (j *joiner) parkAs(name taskRef, h Hold, result []byte, ttl time.Duration, sink *resultSink) {
	j.mu.Lock()
	old := j.parked[name]
	j.parked[name] = &parked{h: h, result: result, ttl: ttl, sink: sink, at: time.Now()}
	j.mu.Unlock()
	if old != nil {
		go j.recordAlone(old)
	}
}

// acked takes the completion waiting for the asynq script keys and args,
// if they are an acknowledgement of its task (KEYS[1] that task's queue's
// active list, ARGV[1] its id).
func (j *joiner) acked(keys []string, args []any) *parked {
	if len(keys) == 0 || len(args) == 0 {
		return nil
	}
	q, ok := strings.CutPrefix(keys[0], "asynq:{")
	q, ok2 := strings.CutSuffix(q, "}:active")
	id, ok3 := args[0].(string)
	if !ok || !ok2 || !ok3 {
		return nil
	}
	name := taskName(q, id)
	j.mu.Lock()
	defer j.mu.Unlock()
	p := j.parked[name]
	delete(j.parked, name)
	return p
}

// ack runs onceq's completion and asynq's acknowledgement as one script and
// gives asynq its script's reply.
func (j *joiner) ack(ctx context.Context, sha string, s *redis.Script, p *parked, keys []string, args []any) *redis.Cmd {
	out := redis.NewCmd(ctx)
	ttl, err := storerule.DoneTTL(j.store.opts.DoneTTL, p.ttl)
	if err != nil {
		j.record(p, err)
		return j.store.rdb.EvalSha(ctx, sha, keys, args...)
	}
	id, _ := args[0].(string)
	task := strings.TrimSuffix(keys[0], "active") + "t:" + id
	args = args[:len(args):len(args)]
	if len(args) == 5 { // mark-as-complete: ARGV[4] is the copy asynq retains
		if msg, ok := args[3].([]byte); ok {
			args[3] = withoutPayload(msg)
		}
	}
	v, err := s.Run(ctx, j.store.rdb, append(keys[:len(keys):len(keys)], task, recordKey(p.h.Key)),
		append(args, holderPrefix(p.h), "d", time.Now().UnixMilli(), p.result, ttl.Milliseconds())...).Result()
	n := int64(1) // asynq's OK alone: the record was written
	if r, ok := v.([]any); ok && len(r) == 2 {
		n, _ = r[0].(int64)
		v = r[1]
	} else if _, ok := v.(string); !ok && err == nil {
		err = fmt.Errorf("onceq: joined acknowledgement replied %v", v)
	}
	if err != nil {
		// Redis trouble: asynq retries its acknowledgement alone; the
		// completion is retried apart while the lease lasts.
		go j.recordAlone(p)
		out.SetErr(err)
		return out
	}
	if aerr, ok := v.(error); ok {
		out.SetErr(aerr)
	} else {
		out.SetVal(v)
	}
	j.record(p, j.store.finish(ctx, opComplete, outcomeCompleted, p.h, n, nil))
	return out
}

// record ends a parked run: err is how recording its completion went.
func (j *joiner) record(p *parked, err error) {
	p.sink.done(err)
	j.m.untrack(p.h)
}

// recordAlone records a completion that no acknowledgement carried, trying
// while its lease lasts (the hold stays tracked, so heartbeats extend it).
// After a joined acknowledgement's error the script may have run, its
// reply lost: then the record is done already, by this hold.
func (j *joiner) recordAlone(p *parked) {
	ctx, cancel := context.WithTimeout(context.Background(), j.m.opts.Lease)
	defer cancel()
	if j.m.recorded(ctx, p.h) {
		j.record(p, nil)
		return
	}
	j.record(p, j.m.complete(ctx, p.h, p.result, p.ttl))
}

// flushKey records at once a completion of k still waiting, so a claim of
// k made next sees it done.
func (j *joiner) flushKey(k Key) {
	if j == nil {
		return
	}
	var ps []*parked
	j.mu.Lock()
	for name, p := range j.parked {
		if p.h.Key == k {
			ps = append(ps, p)
			delete(j.parked, name)
		}
	}
	j.mu.Unlock()
	for _, p := range ps {
		j.recordAlone(p)
	}
}

// sweep records completions whose acknowledgement did not come and
// releases claims whose delivery did not come.
func (j *joiner) sweep() {
	defer close(j.done)
	tick := time.NewTicker(sweepTick)
	defer tick.Stop()
	for {
		select {
		case <-j.stop:
			return
		case <-tick.C:
		}
		j.expire(time.Now().Add(-parkWait), time.Now().Add(-claimWait))
	}
}

// expire records the completions parked before parkedBy and releases the
// claims made before claimedBy, each in the background.
func (j *joiner) expire(parkedBy, claimedBy time.Time) {
	var ps []*parked
	var cs []Hold
	j.mu.Lock()
	for name, p := range j.parked {
		if p.at.Before(parkedBy) {
			ps = append(ps, p)
			delete(j.parked, name)
		}
	}
	for name, c := range j.claims {
		if c.at.Before(claimedBy) {
			if h, ok := c.held(); ok {
				cs = append(cs, h)
			}
			delete(j.claims, name)
		}
	}
	j.mu.Unlock()
	for _, p := range ps {
		go j.recordAlone(p)
	}
	for _, h := range cs {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), j.m.opts.Lease)
			defer cancel()
			_ = j.store.Release(ctx, h, "dequeued, never delivered")
		}()
	}
}

// shutdown stops the sweep and records or releases what is left, before
// ctx ends.
func (j *joiner) shutdown(ctx context.Context) error {
	if j == nil {
		return nil
	}
	select {
	case <-j.stop:
	default:
		close(j.stop)
	}
	<-j.done
	j.mu.Lock()
	ps, cs := j.parked, j.claims
	j.parked, j.claims = map[taskRef]*parked{}, map[taskRef]joinedClaim{}
	j.mu.Unlock()
	var errs []error
	for _, p := range ps {
		err := j.m.complete(ctx, p.h, p.result, p.ttl)
		j.record(p, err)
		if err != nil && !errors.Is(err, ErrLeaseLost) {
			errs = append(errs, err)
		}
	}
	for _, c := range cs {
		h, ok := c.held()
		if !ok {
			continue
		}
		if err := j.store.Release(ctx, h, "dequeued, never delivered"); err != nil && !errors.Is(err, ErrLeaseLost) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
