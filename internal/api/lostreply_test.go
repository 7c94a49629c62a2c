package api_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/dedup/storage"
	"github.com/onceq/onceq/internal/api"
)

// retryUntil posts until the answer is status or the deadline passes; the
// deadline is the bound the issue sets on a retry after an outage.
func (e *env) retryUntil(t *testing.T, path, body, key string, status int, within time.Duration) reply {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		r := e.post(path, body, key)
		if r.Status == status || time.Now().After(deadline) {
			if r.Status != status {
				t.Fatalf("after %s the retry still gets %d %s, want %d", within, r.Status, r.Body, status)
			}
			return r
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Redis stalls (SIGSTOP) while requests are in flight: they get a 503, and
// the claims they sent run when Redis resumes, after the API gave up on
// them. A retry with the same key, with the same or a corrected body, must
// then run at once, not meet a stale claim for the whole lease.
func TestRetryAfterRedisPauseSucceeds(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	// Warm connections, as a running server has: on a fresh one the
	// stalled command would be the handshake, not the claim.
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: 300 * time.Millisecond,
		WriteTimeout: 300 * time.Millisecond, MaxRetries: -1, PoolSize: 2, MinIdleConns: 2})
	t.Cleanup(func() { rdb.Close() })
	// A lease far beyond the test's patience: only clearing the stale claim passes.
	e := newEnvOn(t, rdb, func(o *api.Options) { o.Timeout = time.Second; o.Lease = time.Minute })

	same := paymentBody("pmt-pause", "acct-pause", 100)
	wrong := paymentBody("pmt-typo", "acct-typo", 100)
	corrected := paymentBody("pmt-fixed", "acct-fixed", 100)
	for i, k := range []string{"warm-1", "warm-2", "warm-3"} {
		accepted(t, e.post(paymentPath, paymentBody(k, "acct-"+k, 100+i), k), http.StatusAccepted)
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	t.Cleanup(func() {
		if !resumed {
			srv.Resume()
		}
	})
	for _, c := range []struct{ body, key string }{{same, "pause-1"}, {wrong, "pause-2"}} {
		problem(t, e.post(paymentPath, c.body, c.key), http.StatusServiceUnavailable)
	}
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	resumed = true
	// The stalled claims have run by the time Redis answers a PING after them.
	if err := rdb.Ping(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}

	a := accepted(t, e.retryUntil(t, paymentPath, same, "pause-1", http.StatusAccepted, 5*time.Second), http.StatusAccepted)
	b := accepted(t, e.retryUntil(t, paymentPath, corrected, "pause-2", http.StatusAccepted, 5*time.Second), http.StatusAccepted)
	if a.Key != "payment:charge/pmt-pause" || b.Key != "payment:charge/pmt-fixed" {
		t.Fatalf("retries enqueued %s and %s", a.Key, b.Key)
	}
	if n := e.tasks(); n != 5 {
		t.Fatalf("%d tasks, want 5", n)
	}
}

// failing fails every command while on, as a connection lost mid-enqueue
// would: the producer cannot tell whether its last command ran.
type failing struct{ on atomic.Bool }

func (f *failing) DialHook(next redis.DialHook) redis.DialHook { return next }
func (f *failing) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if f.on.Load() {
			return &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}
		}
		return next(ctx, cmd)
	}
}
func (f *failing) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if f.on.Load() {
			return &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}
		}
		return next(ctx, cmds)
	}
}

// Redis fails after the API's claim, during the enqueue: the client is told
// that the outcome is unknown and to retry with the same key, and that
// retry runs.
func TestRedisFailureMidEnqueueIsAmbiguous503(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	opt := rdb.Options()
	prdb := redis.NewClient(opt)
	t.Cleanup(func() { prdb.Close() })
	f := &failing{}
	prdb.AddHook(f)
	jobs, err := dedup.NewRedisStore(prdb, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvOn(t, rdb, func(o *api.Options) { o.Producer = oncetest.NewProducer(t, prdb, jobs, dedup.ProducerOptions{}) })

	body := paymentBody("pmt-mid", "acct-mid", 100)
	f.on.Store(true)
	p := problem(t, e.post(paymentPath, body, "mid-1"), http.StatusServiceUnavailable)
	if !strings.Contains(p.Detail, "unknown") || !strings.Contains(p.Detail, "same Idempotency-Key") {
		t.Fatalf("503 detail %q does not say the outcome is unknown and to retry with the same key", p.Detail)
	}
	f.on.Store(false)
	accepted(t, e.post(paymentPath, body, "mid-1"), http.StatusAccepted)
}

// A replay is the same bytes whether this process remembers the response
// or another replica reads it from Redis; a cached response never answers
// another body.
func TestReplayFromAnotherReplica(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	other := newEnvOn(t, e.rdb)
	body := paymentBody("pmt-rep", "acct-rep", 100)
	first := e.post(paymentPath, body, "rep-1")
	accepted(t, first, http.StatusAccepted)
	for _, x := range []*env{e, other} {
		r := x.post(paymentPath, body, "rep-1")
		if r.Header.Get(api.ReplayedHeader) != "true" || string(r.Body) != string(first.Body) {
			t.Fatalf("replay %d %s, want %s", r.Status, r.Body, first.Body)
		}
	}
	problem(t, e.post(paymentPath, paymentBody("pmt-rep", "acct-rep", 101), "rep-1"), http.StatusUnprocessableEntity)
}

// loseClaimReply runs the first Claim and then reports its reply lost, as
// a timed-out read does after Redis ran the command.
type loseClaimReply struct {
	storage.Store
	lost atomic.Bool
}

func (s *loseClaimReply) Claim(ctx context.Context, k dedup.Key, fp string, lease time.Duration, delivery string) (storage.Claim, error) {
	c, err := s.Store.Claim(ctx, k, fp, lease, delivery)
	if err == nil && s.lost.CompareAndSwap(false, true) {
		return storage.Claim{}, &net.OpError{Op: "read", Net: "tcp", Err: errors.New("i/o timeout")}
	}
	return c, err
}

// The API retries a claim whose reply was lost itself, as the same
// delivery: it takes its own claim again at once and the request runs,
// instead of meeting that claim as another request's (409 for the lease).
func TestLostClaimReplyRetakenAtOnce(t *testing.T) {
	t.Parallel()
	var lose *loseClaimReply
	e := newEnv(t, func(o *api.Options) {
		lose = &loseClaimReply{Store: o.Store}
		o.Store = lose
		o.Lease = time.Minute
	})
	accepted(t, e.post(paymentPath, paymentBody("pmt-lost", "acct-lost", 100), "lost-1"), http.StatusAccepted)
	if !lose.lost.Load() {
		t.Fatal("no claim reply was lost: the test tested nothing")
	}
	if n := e.tasks(); n != 1 {
		t.Fatalf("%d tasks, want 1", n)
	}
}

// loseEnqueueReply runs the first script the producer sends while armed
// (asynq's enqueue), then fails it and every command after it until down is
// cleared: the reply was lost and Redis went away, so the producer cannot
// find out what became of its enqueue.
type loseEnqueueReply struct{ armed, down atomic.Bool }

func (l *loseEnqueueReply) DialHook(next redis.DialHook) redis.DialHook { return next }
func (l *loseEnqueueReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		lost := &net.OpError{Op: "read", Net: "tcp", Err: errors.New("i/o timeout")}
		if l.down.Load() {
			return lost
		}
		if name := cmd.Name(); (name == "evalsha" || name == "eval") && l.armed.Load() {
			if err := next(ctx, cmd); err != nil {
				return err // NOSCRIPT: the script is sent again, armed still
			}
			l.armed.Store(false)
			l.down.Store(true)
			return lost
		}
		return next(ctx, cmd)
	}
}
func (l *loseEnqueueReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if l.down.Load() {
			return &net.OpError{Op: "read", Net: "tcp", Err: errors.New("i/o timeout")}
		}
		return next(ctx, cmds)
	}
}

// An enqueue that ran but whose reply was lost is a 503; the retry meets
// the job it made as a duplicate and must see it as the caller's own (its
// task, its state), not as another client's: no owner record was written.
func TestLostEnqueueReplyJobIsTheCallers(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	opt := rdb.Options()
	opt.MaxRetries = -1 // as producer serve's client: nothing re-sent
	prdb := redis.NewClient(opt)
	t.Cleanup(func() { prdb.Close() })
	lose := &loseEnqueueReply{}
	prdb.AddHook(lose)
	jobs, err := dedup.NewRedisStore(prdb, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvOn(t, rdb, func(o *api.Options) { o.Producer = oncetest.NewProducer(t, prdb, jobs, dedup.ProducerOptions{}) })
	body := `{"to":"a@example.com","subject":"s","body":"lost reply"}`
	lose.armed.Store(true)
	problem(t, e.post(emailPath, body, "lost-enq-1"), http.StatusServiceUnavailable)
	if lose.armed.Load() {
		t.Fatal("no enqueue reply was lost: the test tested nothing")
	}
	lose.down.Store(false) // Redis is back
	if n := e.tasks(); n != 1 {
		t.Fatalf("%d tasks, want the one the lost reply made", n)
	}
	again := accepted(t, e.post(emailPath, body, "lost-enq-1"), http.StatusOK)
	if again.Decision != dedup.Duplicate || again.TaskID == "" || again.State == "" {
		t.Fatalf("the retry after the lost reply: %+v, want the caller's own job as a duplicate", again)
	}
	e.job(again.Key, http.StatusOK)
}
