package dedup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup/internal/asynqwire"
	"github.com/onceq/onceq/dedup/internal/storerule"
	"github.com/onceq/onceq/dedup/storage"
)

// ProducerOptions configures NewProducer.
type ProducerOptions struct {
	// Catalog tells Status where a key's task is: its type's queue, or the
	// shard its key hashes to (Spec.Shards), read first; only a task not
	// found there is looked for in every queue. Default: none, every queue
	// is looked in.
	Catalog *Catalog
	// Observer sees every enqueue decision (enqueued, duplicate, conflict,
	// throttled). Default: none.
	Observer Observer
	// Trace, when set, is called as each Enqueue of a valid job starts. The
	// context it returns is the enqueue's, and the headers it returns go on
	// the job's task (a W3C trace context, say), so the worker can continue
	// the trace. end gets the outcome and, for a Duplicate or Conflict, the
	// headers of the task the repeat met (nil when asynq holds none), which
	// the Producer reads anyway: a span can link to the original job at no
	// cost. Default: none.
	Trace func(ctx context.Context, j Job) (_ context.Context, headers map[string]string, end func(o Outcome, met map[string]string, err error))
	// AllowUnverifiedAsynq lets NewProducer run on an asynq release the
	// library was not verified against (its error names the linked one and
	// the verified ones), without what needs asynq's internals: no insert
	// guard, so a key that failed for good stays refused by asynq's
	// archived task (up to 90 days), Repeat's replace and debounce return
	// errors, and completed tasks are kept to refuse repeats. The Observer
	// hears what is off. Default: false, refuse.
	AllowUnverifiedAsynq bool
}

// Producer enqueues Jobs under their dedup policy. Safe for concurrent use.
type Producer struct {
	rdb    redis.UniversalClient
	client *asynq.Client
	insp   *asynq.Inspector
	store  storage.Store
	opts   ProducerOptions
	// folded: store is the Redis one on the Producer's own client, so a
	// guarded insert takes its job's windows itself and reads the key's
	// record: a completed task need not be kept to refuse repeats.
	folded atomic.Pointer[redisStore]
	// cluster: a job goes to its key's home queue (shard.go), in its
	// record's slot.
	cluster bool
}

// NewProducer builds a Producer on rdb; the caller owns rdb and closes it.
// store holds the windows and answers Status; nil is the Redis one on rdb (NewRedisStore)
// with the default options. It adds a hook to rdb that runs the Producer's
// inserts behind their guard and lets every other command through. It
// refuses an asynq release the library was not verified against, unless
// opts.AllowUnverifiedAsynq.
func NewProducer(rdb redis.UniversalClient, store storage.Store, opts ProducerOptions) (*Producer, error) {
	if store == nil {
		store, _ = NewRedisStore(rdb, storage.Options{}) // the defaults are valid
	}
	if opts.Observer == nil {
		opts.Observer = func(context.Context, Event) {}
	}
	verr := asynqwire.Check()
	if verr != nil && !opts.AllowUnverifiedAsynq {
		return nil, fmt.Errorf("dedup: new producer: %w (ProducerOptions.AllowUnverifiedAsynq runs without what needs asynq's internals)", verr)
	}
	_, cluster := rdb.(*redis.ClusterClient)
	p := &Producer{
		rdb:     rdb,
		client:  asynq.NewClientFromRedisClient(rdb),
		insp:    asynq.NewInspectorFromRedisClient(rdb),
		store:   store,
		opts:    opts,
		cluster: cluster,
	}
	if verr != nil {
		opts.Observer(context.Background(), Event{Op: opEnqueue, Outcome: outcomeOff, Reason: verr.Error() +
			": no insert guard: a key that failed for good stays refused by its archived task, replace and debounce fail, completed tasks are kept"})
		return p, nil
	}
	asynqwire.Intercept(rdb)
	if s, ok := store.(*redisStore); ok && s.rdb == rdb {
		p.folded.Store(s)
	}
	return p, nil
}

// Task headers the Producer adds to what a constructor set.
const (
	// headerFailures carries the errors of the key's earlier incarnations
	// that failed for good (a JSON array, newest last, at most maxFailures).
	headerFailures = "onceq-failures"
	// headerFirst is when the first job of a debounced run was accepted
	// (Unix ms): the start never moves past it plus the policy's MaxWait.
	headerFirst = "onceq-first"
)

const maxFailures = 3

// Enqueue submits j, with asynq's options opts added to the job's own
// (Job.With), unless its policy refuses it. The default policy (unique
// window) costs exactly the one round trip of asynq's Enqueue: the key is the
// asynq TaskID, which asynq refuses atomically while the task exists, and
// the script that inserts it also refuses a key whose record is done
// (guardEnqueue), so asynq need not keep a completed task (see
// Spec.WriteResult for when it does). Its windows and rate rules are
// taken in that same script, except on Redis Cluster for a rule whose key
// has another home than the job's (another slot): there each adds one
// Reserve. On Cluster the job goes to its key's home queue (ClusterQueues).
//
// A refused insert is followed by two reads (task and record, in parallel)
// that say what the key's state is, and so what the repeat gets: a task that
// failed for good is replaced by this job as the key's next incarnation; a
// job not yet started is replaced under j.Repeat's replace or debounce; else
// the answer is Duplicate or Conflict. Each replacement is one atomic script
// that refuses if the task moved on meanwhile, and then the key is read again.
//
// Windows are taken only by accepted jobs. The insert's script checks and
// takes them with the insert, atomically. Otherwise (Cluster, a rule in
// another home) a reservation this call took is given back (compare-and-delete on its
// holder) when a later rule, asynq's task id check or the enqueue itself
// refuses the job, so between the reserve and the give-back (one round
// trip) a concurrent job on the same rule key is refused. A window the same
// key already held is left alone: it belongs to the accepted job.
func (p *Producer) Enqueue(ctx context.Context, j Job, opts ...asynq.Option) (Outcome, error) {
	j = j.With(opts...)
	if j.Err != nil {
		return Outcome{}, j.Err
	}
	if j.Task == nil {
		return Outcome{}, errors.New("onceq: enqueue: job has no task")
	}
	if p.cluster && j.Unique > 0 {
		j.Queue = ClusterQueue(j.Queue, j.Key) // its record's slot (shard.go)
	}
	if p.opts.Trace == nil {
		return p.enqueue(ctx, j, nil)
	}
	ctx, headers, end := p.opts.Trace(ctx, j)
	out, err := p.enqueue(ctx, j, headers)
	end(out, out.met, err)
	out.met = nil
	return out, err
}

// enqueue is Enqueue with extra task headers.
func (p *Producer) enqueue(ctx context.Context, j Job, headers map[string]string) (Outcome, error) {
	holder := j.Key.String()
	out := Outcome{Key: holder, Queue: j.Queue}
	var taken []*Rule
	// The give-back must happen even when the caller's ctx has ended.
	giveBack := func() { p.unreserve(context.WithoutCancel(ctx), taken, holder) }
	// A guarded insert takes the windows in its own step (withRules) where
	// they share its slot; else each is reserved first and given back on refusal.
	folded := p.folded.Load()
	fold := folded != nil && j.Unique > 0 && len(j.Rules) > 0 && p.rulesAtHome(j)
	if j.Repeat.Policy == repeatSuccessor && j.Unique > 0 && (folded == nil || p.cluster) {
		return Outcome{}, fmt.Errorf("onceq: enqueue %s: the successor policy needs the Redis store on the Producer's own client, "+
			"on one Redis (not Cluster) and a verified asynq: its job must start in the step that sees the run end", holder)
	}
	for _, r := range j.Rules {
		if fold {
			if err := storerule.AtLeastMS("window", r.Window); err != nil {
				return Outcome{}, fmt.Errorf("onceq: enqueue %s: rule %q: %w", holder, r.Key.String(), err)
			}
			continue
		}
		res, err := p.store.Reserve(ctx, r.Key, r.Window, holder)
		if err != nil {
			giveBack()
			return Outcome{}, fmt.Errorf("onceq: enqueue %s: %w", holder, err)
		}
		if res.Reserved {
			taken = append(taken, r)
			continue
		}
		if res.Holder == holder && !r.Repeats && (!r.OutlastsKey || p.remembers(ctx, j)) {
			continue // a repeat of the same key falls through to the task id check
		}
		giveBack()
		return p.throttled(ctx, j, out, r, res.RetryAfter), nil
	}

	next := insert{incarnation: 1}
	if j.Repeat.Policy == repeatDebounce {
		next.delay, next.first = j.Repeat.Delay, time.Now().UnixMilli()
	}
	for try := 0; ; try++ {
		next.last = try >= 2
		info, guard, err := p.insert(ctx, j, holder, next, headers, fold)
		var found *refusal
		if guard != nil {
			found = guard.Found
		}
		if fold && guard != nil { // nil: the replace could not be guarded
			if t := guard.Throttled; t != nil { // a window refused it, in the insert's step
				r := j.Rules[t.rule]
				folded.observe(ctx, opReserve, r.Key, outcomeThrottled, 0, storerule.ReasonThrottled(t.Holder, t.RetryAfter))
				return p.throttled(ctx, j, out, r, t.RetryAfter), nil
			}
			if err == nil {
				p.foldedReserves(ctx, folded, j, holder, guard)
			}
		}
		if guard != nil && guard.Reincarnate > next.incarnation && try < 2 {
			// The key was reset: its next job is a new life.
			next.incarnation, next.why = guard.Reincarnate, "the key was reset"
			continue
		}
		if err == nil && guard != nil && guard.Waiting {
			out.Decision, out.TaskID, out.State = Enqueued, j.Key.TaskID(), StatusWaiting
			out.Incarnation, out.Replaced = next.incarnation, guard.Displaced
			out.Reason = "waits as the successor of the key's running job, and starts when that run ends"
			break
		}
		if err == nil {
			out.Decision, out.TaskID, out.State = Enqueued, info.ID, taskStatus(info.State)
			out.Incarnation, out.Reason = next.incarnation, next.why
			out.Replaced = slices.Contains(next.replace, "pending") || next.pending
			break
		}
		if !errors.Is(err, asynq.ErrTaskIDConflict) {
			giveBack()
			return Outcome{}, fmt.Errorf("onceq: enqueue %s: %w", holder, err)
		}
		out.TaskID = j.Key.TaskID()
		// After the key moved on under two replacements, report what it is.
		// The successor policy follows a key that moves on under it
		// (pending, running, ended) a few more times.
		tries := 2
		if j.Repeat.Policy == repeatSuccessor {
			tries = 6
		}
		again, ok := p.refused(ctx, j, found, &out, try < tries, next)
		if !ok {
			giveBack()
			break
		}
		next = again
	}
	p.observe(ctx, j, out)
	return out, nil
}

// rulesAtHome says whether every window of j's rules sits in the slot of
// j's task, so that its insert can take them: always outside Cluster; on
// Cluster when each rule's key has j's key's home (Spec.Window's does).
func (p *Producer) rulesAtHome(j Job) bool {
	for _, r := range j.Rules {
		if p.cluster && homeOf(r.Key) != homeOf(j.Key) {
			return false
		}
	}
	return true
}

// remembers says whether j's key still answers a repeat of j (Rule.OutlastsKey):
// a done record, or a task in a state other than completed. The guarded
// insert decides it in its own step; this is the read for the other paths.
func (p *Producer) remembers(ctx context.Context, j Job) bool {
	if j.Unique <= 0 {
		return false
	}
	if rec, err := p.store.Status(ctx, j.Key); err == nil && rec.State == StatusDone {
		return true
	}
	info, err := p.insp.GetTaskInfo(j.Queue, j.Key.TaskID())
	return err == nil && info.State != asynq.TaskStateCompleted
}

// insert is one try at putting j's task into asynq.
type insert struct {
	incarnation int
	failures    []string // earlier incarnations' errors
	replace     []string // asynq states the existing task may be replaced from
	delay       time.Duration
	first       int64  // debounce: the run's first acceptance, Unix ms
	successor   bool   // through lua/successor.lua (the successor policy)
	pending     bool   // successor: in place of a task that has not started
	why         string // why the key has a new incarnation (Outcome.Reason)
	// last: a refusal of this insert is final (refused may not replace).
	last bool
}

// The guard it returns (nil unguarded) says what held j's key when it
// refused the insert, and, with fold, what the rules' windows did.
func (p *Producer) insert(ctx context.Context, j Job, holder string, in insert, extra map[string]string, fold bool) (*asynq.TaskInfo, *enqueueGuard, error) {
	opts := []asynq.Option{asynq.Queue(j.Queue)}
	task := j.Task
	if j.Unique > 0 {
		opts = append(opts, asynq.TaskID(j.Key.TaskID()))
		if j.WriteResult || in.incarnation > 1 || p.folded.Load() == nil {
			// asynq's copy of a completed task is kept for the dashboard,
			// for a key's history (earlier incarnations' failures live in
			// its headers), and where only it refuses repeats: the guard
			// cannot read the record.
			opts = append(opts, asynq.Retention(j.Unique))
		}
		task = leanTask(j, holder)
	}
	if j.MaxRetry > 0 {
		opts = append(opts, asynq.MaxRetry(j.MaxRetry))
	}
	opts = append(opts, j.opts...) // the job's own win over the Spec's
	if in.delay > 0 {
		opts = append(opts, asynq.ProcessIn(in.delay)) // the debounce policy's start
	}
	if in.incarnation > 1 || in.first > 0 || len(extra) > 0 {
		h := maps.Clone(task.Headers())
		if h == nil {
			h = make(map[string]string, len(extra)+2)
		}
		for name, v := range extra {
			if _, ok := h[name]; !ok { // the task's own headers win
				h[name] = v
			}
		}
		if in.incarnation > 1 {
			h[headerIncarnation] = strconv.Itoa(in.incarnation)
			if b, err := json.Marshal(in.failures); err == nil && len(in.failures) > 0 {
				h[headerFailures] = string(b)
			}
		}
		if in.first > 0 {
			h[headerFirst] = strconv.FormatInt(in.first, 10)
		}
		task = asynq.NewTaskWithHeaders(task.Type(), task.Payload(), h)
	}
	if j.Unique <= 0 {
		info, err := p.client.EnqueueContext(ctx, task, opts...)
		return info, nil, err
	}
	gctx, guard := guardEnqueue(ctx, j.Key, j.Fingerprint, p.cluster, in.replace...)
	guard.recording(ctx, j, in)
	if s := p.folded.Load(); s != nil {
		guard.markDone = s.opts.DoneTTL // what its workers most likely keep marks for
	}
	if fold {
		guard.withRules(j.Rules, holder)
	}
	if in.successor {
		guard.successor, guard.replacesPending = j.Unique, in.pending
	}
	info, err := p.client.EnqueueContext(gctx, task, opts...)
	if !guard.Ran {
		// Another asynq's insert: nothing reads the record in its step, so
		// windows are reserved apart and completed tasks kept from now on.
		p.folded.Store(nil)
	}
	if !guard.Ran && len(in.replace) > 0 && errors.Is(err, asynq.ErrTaskIDConflict) {
		return nil, nil, fmt.Errorf("onceq: cannot replace the task of %s: this asynq's enqueue script is not the one onceq guards (%w)", holder, err)
	}
	return info, guard, err
}

// refused reads what holds j's key after asynq refused its task id and
// says whether the key's state lets j in by another insert (when
// mayReplace): a task that failed for good (a new incarnation), or one not
// started under j's repeat policy. Otherwise it fills out with the answer.
// A conflict never carries the other job's result.
// found, when the guard's refusal carried it, spares reading the task and
// the record again. last is the insert that was refused.
func (p *Producer) refused(ctx context.Context, j Job, found *refusal, out *Outcome, mayReplace bool, last insert) (insert, bool) {
	var (
		wg    sync.WaitGroup
		info  *asynq.TaskInfo
		rec   storage.Record
		other bool // a compact mark holds the key for other content
		ierr  error
		rerr  error
	)
	rs, redisStore := p.store.(*redisStore)
	if found != nil && redisStore {
		info, rec, other = found.Task, found.Record, found.other
		if info == nil {
			ierr = asynq.ErrTaskNotFound
		}
	} else {
		wg.Go(func() { info, ierr = p.insp.GetTaskInfo(j.Queue, j.Key.TaskID()) })
		wg.Go(func() {
			if redisStore {
				rec, other, rerr = rs.status(ctx, j.Key, j.Fingerprint)
				return
			}
			rec, rerr = p.store.Status(ctx, j.Key)
		})
		wg.Wait()
	}
	if ierr != nil {
		info = nil
	}
	if rerr != nil {
		rec = storage.Record{State: StatusUnknown}
	}
	// A key its compact mark holds for the same content is done: a
	// duplicate under every policy (the mark is read in the guard's step).
	compactSame := rec.Compact && !other && info == nil
	if mayReplace && j.Repeat.Policy == repeatSuccessor && !compactSame {
		if in, ok := p.successorOf(j, info, rec, last); ok {
			return in, true
		}
	} else if mayReplace && info != nil && rec.State != StatusDone {
		if in, ok := p.replaceable(j, info, rec); ok {
			return in, true
		}
	}
	stored := ""
	if info != nil {
		stored = info.Headers[headerFingerprint]
		out.met = info.Headers
	}
	if stored == "" && rerr == nil {
		stored = rec.Fingerprint
	}
	if (stored != "" && stored != j.Fingerprint) || (stored == "" && other) {
		if stored == "" {
			stored = "of a job done, its result no longer kept"
		}
		out.Decision, out.State = Conflict, StatusUnknown
		out.Reason = "key " + j.Key.String() + " was accepted with other content (fingerprint " + short(stored) +
			", this job " + short(j.Fingerprint) + "); nothing was enqueued"
		return insert{}, false
	}
	out.Decision = Duplicate
	st := statusOf(j.Key, rec, info)
	out.State, out.Incarnation = st.State, st.Incarnation
	if st.State == StatusDone {
		out.Result = rec.Result
		if len(out.Result) == 0 && info != nil {
			out.Result = info.Result
		}
	}
	out.Reason = "already accepted: " + string(st.State)
	if st.State == StatusDone {
		out.Reason = "already processed: done"
		if rec.Compact && info == nil {
			out.Reason = "already processed: " + storerule.ReasonCompact
		}
	}
	return insert{}, false
}

// replaceable says how j may take the place of the key's existing task.
func (p *Producer) replaceable(j Job, info *asynq.TaskInfo, rec storage.Record) (insert, bool) {
	inc := incarnationOf(info.Headers)
	switch {
	case info.State == asynq.TaskStateArchived && !j.KeepFailed:
		// Failed for good: this job is the key's next life, with a new
		// downstream key so a gateway's cached decline is not replayed.
		in := afterFailure(info, rec)
		in.replace = []string{"archived"}
		if j.Repeat.Policy == repeatDebounce {
			in.delay, in.first = j.Repeat.Delay, time.Now().UnixMilli()
		}
		return in, true
	case info.State == asynq.TaskStateCompleted:
		// The record, not asynq's retention, says how long done lasts: a
		// completed task that outlived it (asynq's janitor deletes expired
		// ones every few seconds) holds a key that is free.
		return insert{incarnation: inc, replace: []string{"completed"}}, rec.State == StatusUnknown
	case info.State != asynq.TaskStatePending && info.State != asynq.TaskStateScheduled:
		return insert{}, false
	}
	same := info.Headers[headerFingerprint] == j.Fingerprint
	switch j.Repeat.Policy {
	case repeatReplace, repeatSuccessor:
		if same {
			return insert{}, false // nothing to replace: a duplicate
		}
		return insert{incarnation: inc, replace: []string{"pending", "scheduled"}}, true
	case repeatDebounce:
		now := time.Now()
		first, err := strconv.ParseInt(info.Headers[headerFirst], 10, 64)
		if err != nil {
			first = now.UnixMilli() // not debounced before: this repeat starts the run
		}
		delay := min(j.Repeat.Delay, time.UnixMilli(first).Add(j.Repeat.MaxWait).Sub(now))
		return insert{incarnation: inc, replace: []string{"pending", "scheduled"},
			delay: max(delay, 0), first: first}, true
	}
	return insert{}, false
}

// afterFailure is the next life of a key whose task info failed for good
// (rec its record): the next incarnation, carrying the failures so far.
func afterFailure(info *asynq.TaskInfo, rec storage.Record) insert {
	in := insert{incarnation: incarnationOf(info.Headers) + 1, why: "the earlier job failed for good"}
	_ = json.Unmarshal([]byte(info.Headers[headerFailures]), &in.failures)
	cause := info.LastErr
	if cause == "" {
		cause = rec.Error
	}
	in.failures = append(in.failures, cause)
	if len(in.failures) > maxFailures {
		in.failures = in.failures[len(in.failures)-maxFailures:]
	}
	return in
}

// ended is why a successor that did not wait has a new incarnation.
const ended = "the earlier job had ended"

// successorOf says how j follows its key's job under the successor
// policy, always through lua/successor.lua: in place of a task that has
// not started, as replace does (the same content is a duplicate); as the
// successor of a job that runs or waits for a retry; or at once as the
// key's next incarnation when the run has ended. last: when the script
// refused j built for what the key still is, j is a duplicate; one built
// for what the key was is built again.
func (p *Producer) successorOf(j Job, info *asynq.TaskInfo, rec storage.Record, last insert) (insert, bool) {
	pending := info != nil && (info.State == asynq.TaskStatePending || info.State == asynq.TaskStateScheduled)
	switch {
	case last.successor && last.pending == pending:
		return insert{}, false
	case pending:
		return insert{incarnation: incarnationOf(info.Headers), successor: true, pending: true}, true
	case info == nil: // a done first incarnation keeps no task
		return insert{incarnation: 2, successor: true, why: ended}, true
	case info.State == asynq.TaskStateArchived:
		in := afterFailure(info, rec)
		in.successor = true
		return in, true
	}
	return insert{incarnation: incarnationOf(info.Headers) + 1, successor: true, why: ended}, true
}

// incarnationOf reads an existing task's incarnation; one whose header is
// unreadable (not the Producer's) counts as the first.
func incarnationOf(h map[string]string) int {
	if n, err := parseIncarnation(h); err == nil {
		return n
	}
	return 1
}

func short(fp string) string {
	if len(fp) > 12 {
		return fp[:12]
	}
	return fp
}

// throttled is the answer to j when rule r's window refused it.
func (p *Producer) throttled(ctx context.Context, j Job, out Outcome, r *Rule, retryAfter time.Duration) Outcome {
	out.Decision, out.RetryAfter, out.State = Throttled, retryAfter, StatusUnknown
	out.Reason = fmt.Sprintf("%s is inside its %s window", r.Key.String(), r.Window)
	p.observe(ctx, j, out)
	return out
}

// foldedReserves reports the windows an accepted insert took as Reserve
// would. Should asynq have sent a script the guard does not know (another
// asynq version), nothing took them: they are reserved now, after the
// insert (and insert stopped folding).
func (p *Producer) foldedReserves(ctx context.Context, s *redisStore, j Job, holder string, g *enqueueGuard) {
	if !g.Ran {
		for _, r := range j.Rules {
			_, _ = p.store.Reserve(context.WithoutCancel(ctx), r.Key, r.Window, holder)
		}
		return
	}
	for i, r := range j.Rules {
		reason := ""
		if i < len(g.Taken) && g.Taken[i] == '0' {
			reason = storerule.ReasonSameHolder
		}
		s.observe(ctx, opReserve, r.Key, outcomeReserved, 0, reason)
	}
}

func (p *Producer) unreserve(ctx context.Context, rules []*Rule, holder string) {
	for _, r := range rules {
		_ = p.store.Unreserve(ctx, r.Key, holder) // best effort: the window expires anyway
	}
}

func (p *Producer) observe(ctx context.Context, j Job, o Outcome) {
	p.opts.Observer(ctx, Event{Op: opEnqueue, Key: j.Key, Outcome: o.Decision, Reason: o.Reason})
}
