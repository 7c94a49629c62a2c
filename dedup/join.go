package dedup

// The join: a Server's claim of a new key rides asynq's dequeue, and its
// completion asynq's acknowledgement, in the same calls (asynqwire): two
// round trips per task, as bare asynq. What the join does not recognise
// passes through unchanged, and the middleware makes its own calls.

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup/internal/asynqwire"
	"github.com/onceq/onceq/dedup/internal/history"
	"github.com/onceq/onceq/dedup/storage"
)

// ackJoins are asynq's acknowledgements, each behind the completion.
var ackJoins = asynqwire.NewAcks(luaSource("finish.lua"))

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
	store    *redisStore
	dequeues bool           // run the joined dequeue; tests turn it off
	acks     asynqwire.Acks // the joined acknowledgements; tests empty it
	off      atomic.Bool
	// cluster: a completion joins asynq's acknowledgement only for a task
	// in its key's home queue (atHome).
	cluster bool
	// claim is what a joined dequeue writes, but for its token and time.
	claim asynqwire.Claim

	mu     sync.Mutex
	claims map[taskRef]joinedClaim // dequeued, not yet delivered
	parked map[taskRef]*parked     // handler done, waiting for asynq's acknowledgement
	stop   chan struct{}
	done   chan struct{}
}

type joinedClaim struct {
	rec, fp  string // the record key and fingerprint the producer wrote
	acquired bool
	hold     storage.Hold // acquired; Key still empty
	old      string       // not acquired: the record found
	at       time.Time
	noHist   bool // acquired, and the producer started no history for the key
}

// held is the hold an acquired claim gives, its key read back from the
// record key; false when the dequeue acquired nothing.
func (c joinedClaim) held() (storage.Hold, bool) {
	k, err := keyOfRecord(c.rec)
	if !c.acquired || err != nil {
		return storage.Hold{}, false
	}
	h := c.hold
	h.Key = k
	return h, true
}

// clockSkew is how far apart the producers' and workers' clocks may be
// for the dequeue's mark shortcut (markFresh).
const clockSkew = time.Minute

// markFresh is how long after the producer's guard checked a key's compact
// marks the joined dequeue need not read them again: a mark stands without
// its record only once a completion's result TTL has passed, the shortest
// of this worker's (its store's, or a type's own), less clockSkew. It
// assumes the workers of a queue share their result TTLs.
func markFresh(store time.Duration, types map[string]typeOptions) time.Duration {
	shortest := store
	for _, o := range types {
		if o.ResultTTL > 0 {
			shortest = min(shortest, o.ResultTTL)
		}
	}
	return max(shortest-clockSkew, 0)
}

type parked struct {
	ctx    context.Context // the run's: its task and incarnation, for the history
	h      storage.Hold
	result []byte
	ttl    time.Duration
	keep   time.Duration // the result TTL
	sink   *resultSink
	at     time.Time
}

// joining returns the client to give asynq for a Server on rdb and store,
// and wires m to it; rdb itself when the join cannot apply.
func joining(rdb redis.UniversalClient, store storage.Store, m *Middleware) redis.UniversalClient {
	s, ok := store.(*redisStore)
	if !ok || s.rdb != rdb {
		return rdb // another store: nothing of it rides asynq's scripts
	}
	_, cluster := rdb.(*redis.ClusterClient)
	j := &joiner{cluster: cluster, m: m, store: s, dequeues: true, acks: ackJoins, claims: map[taskRef]joinedClaim{}, parked: map[taskRef]*parked{},
		stop: make(chan struct{}), done: make(chan struct{})}
	j.claim = asynqwire.Claim{OwnerPrefix: bootOwner + "/", TTL: m.opts.Lease + s.opts.FailedTTL, Grace: s.opts.FailedTTL,
		Fresh: markFresh(s.opts.ResultTTL, m.types)}.Fixed()
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
	if q, known, ok := asynqwire.DequeueCall(sha, keys, args); ok {
		known = known && j.dequeues
		if known && !j.off.Load() {
			return j.dequeue(ctx, q, sha, keys, args)
		}
		if !known && j.off.CompareAndSwap(false, true) {
			j.m.opts.Observer(ctx, Event{Op: opJoin, Outcome: outcomeOff,
				Reason: "asynq's dequeue script is not a verified one: claims and completions go as calls of their own"})
		}
	}
	if p := j.acked(keys, args); p != nil {
		if j.acks.Known(sha) {
			return j.ack(ctx, sha, p, keys, args)
		}
		j.record(p, j.m.complete(ctx, p.h, p.result, p.ttl, p.keep)) // an acknowledgement the join does not know
	}
	return c.UniversalClient.EvalSha(ctx, sha, keys, args...)
}

// taskRef names a task of the join's maps: a struct, so that no lookup
// builds a string.
type taskRef struct{ queue, id string }

func taskName(queue, id string) taskRef { return taskRef{queue, id} }

// dequeue runs asynq's dequeue of queue and the claim of the task it pops.
func (j *joiner) dequeue(ctx context.Context, queue, sha string, keys []string, args []any) *redis.Cmd {
	out := redis.NewCmd(ctx)
	c := j.claim
	c.Token, c.Now = nextToken(), time.Now()
	c.Head = history.Head(c.Now, sourceWorker, "")
	d, err := asynqwire.Dequeue(ctx, j.store.rdb, sha, keys, args, c)
	if d.Plain && j.off.CompareAndSwap(false, true) {
		j.m.opts.Observer(ctx, Event{Op: opJoin, Outcome: outcomeOff,
			Reason: "this Redis cannot run the joined dequeue: claims and completions go as calls of their own"})
	}
	if err != nil {
		out.SetErr(err) // redis.Nil: the queue is empty
		return out
	}
	if d.Record != "" {
		jc := joinedClaim{rec: d.Record, at: c.Now, acquired: d.Claimed}
		if d.Claimed {
			jc.fp, jc.hold = d.Found, storage.Hold{Token: c.Token, Owner: bootOwner + "/" + strings.ReplaceAll(d.ID, "|", "_")}
			jc.noHist = d.History == ""
		} else {
			jc.old = d.Found
		}
		j.mu.Lock()
		j.claims[taskName(queue, d.ID)] = jc
		j.mu.Unlock()
	}
	out.SetVal(d.Msg)
	return out
}

// claimed answers the delivery in ctx of key k from the claim its dequeue
// made; false when there is none, or it does not settle the delivery (a
// running or failed record): the middleware claims itself then.
func (j *joiner) claimed(ctx context.Context, k Key, fp string) (storage.Claim, bool) {
	if j == nil {
		return storage.Claim{}, false
	}
	q, _ := asynq.GetQueueName(ctx)
	id, ok := asynq.GetTaskID(ctx)
	if !ok {
		return storage.Claim{}, false
	}
	name := taskName(q, id)
	j.mu.Lock()
	c, ok := j.claims[name]
	delete(j.claims, name)
	j.mu.Unlock()
	if !ok {
		return storage.Claim{}, false
	}
	h := c.hold
	h.Key = k
	if same := c.rec == recordKey(k); !same || (c.acquired && c.fp != fp) {
		// The worker keys this task otherwise than its producer did.
		if c.acquired && same {
			_ = j.store.Release(ctx, h, "keyed otherwise by the worker")
		}
		return storage.Claim{}, false
	}
	if c.acquired {
		if c.noHist {
			j.m.mu.Lock()
			j.m.noHist[h] = struct{}{}
			j.m.mu.Unlock()
		}
		cl := storage.Claim{Outcome: Acquired, Hold: h, Attempt: 1, LeaseUntil: c.at.Add(j.m.opts.Lease)}
		j.store.report(ctx, k, cl)
		return cl, true
	}
	cl, err := j.store.decide(k, fp, c.old, -1)
	if err != nil || (cl.Outcome != Duplicate && cl.Outcome != Conflict) {
		return storage.Claim{}, false
	}
	j.store.report(ctx, k, cl)
	return cl, true
}

// park hands the completion of the run of h to asynq's acknowledgement of
// the task in ctx; false when it must be recorded now.
func (j *joiner) park(ctx context.Context, h storage.Hold, result []byte, ttl, keep time.Duration, sink *resultSink) bool {
	if j == nil || j.off.Load() || len(result) > j.store.opts.MaxResultBytes {
		return false
	}
	q, _ := asynq.GetQueueName(ctx)
	id, ok := asynq.GetTaskID(ctx)
	if !ok || !atHome(j.cluster, q, h.Key) {
		return false // on Cluster a task outside its key's home: its record is in another slot
	}
	j.parkAs(ctx, taskName(q, id), h, result, ttl, keep, sink)
	return true
}

func (j *joiner) parkAs(ctx context.Context, name taskRef, h storage.Hold, result []byte, ttl, keep time.Duration, sink *resultSink) {
	j.mu.Lock()
	old := j.parked[name]
	j.parked[name] = &parked{ctx: context.WithoutCancel(ctx), h: h, result: result, ttl: ttl, keep: keep, sink: sink, at: time.Now()}
	j.mu.Unlock()
	if old != nil {
		go j.recordAlone(old)
	}
}

// acked takes the completion waiting for the asynq script keys and args,
// if they are an acknowledgement of its task.
func (j *joiner) acked(keys []string, args []any) *parked {
	q, id, ok := asynqwire.AckCall(keys, args)
	if !ok {
		return nil
	}
	name := taskName(q, id)
	j.mu.Lock()
	defer j.mu.Unlock()
	p := j.parked[name]
	delete(j.parked, name)
	return p
}

// ack runs the completion and asynq's acknowledgement as one script and
// gives asynq its script's reply.
func (j *joiner) ack(ctx context.Context, sha string, p *parked, keys []string, args []any) *redis.Cmd {
	out := redis.NewCmd(ctx)
	j.m.mu.Lock()
	_, noHist := j.m.noHist[p.h]
	j.m.mu.Unlock()
	c, err := j.store.completion(p.h, p.result, p.ttl, p.keep, !noHist)
	if err != nil {
		j.record(p, err)
		return j.store.rdb.EvalSha(ctx, sha, keys, args...)
	}
	if r, ok := RunFromContext(p.ctx); ok && r.Key == p.h.Key && c.Mark.Bucket != "" {
		c.MarkFP = markFP(r.Fingerprint) // the claim wrote it into the record
	}
	if !noHist {
		c.Entry = workerEntry(p.ctx, p.h.Key, outcomeCompleted, "")
	}
	n, v, err := j.acks.Run(ctx, j.store.rdb, sha, keys, args, c)
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
	ctx, cancel := context.WithTimeout(p.ctx, j.m.opts.Lease)
	defer cancel()
	if j.m.recorded(ctx, p.h) {
		j.record(p, nil)
		return
	}
	j.record(p, j.m.complete(ctx, p.h, p.result, p.ttl, p.keep))
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
	var cs []storage.Hold
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
		err := j.m.complete(ctx, p.h, p.result, p.ttl, p.keep)
		j.record(p, err)
		if err != nil && !errors.Is(err, storage.ErrLeaseLost) {
			errs = append(errs, err)
		}
	}
	for _, c := range cs {
		h, ok := c.held()
		if !ok {
			continue
		}
		if err := j.store.Release(ctx, h, "dequeued, never delivered"); err != nil && !errors.Is(err, storage.ErrLeaseLost) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
