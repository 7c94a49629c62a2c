package dedup_test

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/dedup/storage"
)

// replyDropper is a loopback proxy to Redis that can swallow replies while
// still forwarding commands: Redis runs what it is sent and the client never
// hears back, the "lost reply" of a network cut at the wrong moment.
type replyDropper struct {
	addr string
	drop atomic.Bool
}

func newReplyDropper(t *testing.T, backend string) *replyDropper {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &replyDropper{addr: ln.Addr().String()}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", backend)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, s)
			mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(s, c); s.Close() })
			wg.Go(func() { p.replies(c, s) })
		}
	})
	return p
}

func (p *replyDropper) replies(client, server net.Conn) {
	defer client.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 && !p.drop.Load() {
			if _, werr := client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Issue 14: Redis runs a claim whose reply is lost. The same delivery takes
// the key again at once, with a fresh token, while another delivery still
// waits for the lease (a minute here); the lost claim's token is fenced out.
func TestLostClaimReplyRetakenBySameDelivery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t)
	proxy := newReplyDropper(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.addr, MaxRetries: -1, ReadTimeout: 300 * time.Millisecond})
	t.Cleanup(func() { rdb.Close() })
	s, _ := newStore(t, rdb, fullRecords)
	direct, _ := newStore(t, srv.Client(t), fullRecords)
	k := mustKey(t, "payment:charge", "lost-reply")
	mine := "boot-1/task-7"

	if err := rdb.Ping(ctx).Err(); err != nil { // connect (and handshake) first
		t.Fatal(err)
	}
	proxy.drop.Store(true)
	if c, err := s.Claim(ctx, k, "fp", time.Minute, mine); err == nil {
		t.Fatalf("claim with its reply swallowed returned %+v", c)
	}
	proxy.drop.Store(false)
	r, err := direct.Status(ctx, k)
	if err != nil || r.State != dedup.StatusRunning || r.Owner != "boot-1/task-7" {
		t.Fatalf("Redis should have run the lost claim: %+v %v", r, err)
	}
	lost := storage.Hold{Key: k, Token: r.Token, Owner: r.Owner}

	start := time.Now()
	other, err := s.Claim(ctx, k, "fp", time.Minute, "boot-2/task-7")
	if err != nil || other.Outcome != dedup.InProgress || time.Until(other.LeaseUntil) < 50*time.Second {
		t.Fatalf("another delivery: %+v %v, want in progress for about a minute", other, err)
	}
	again, err := s.Claim(ctx, k, "fp", time.Minute, mine)
	if err != nil || again.Outcome != dedup.Acquired || again.Hold.Token <= lost.Token {
		t.Fatalf("same delivery: %+v %v", again, err)
	}
	t.Logf("re-taken %v after the lost reply, lease was %v", time.Since(start), time.Minute)
	if err := direct.Complete(ctx, lost, []byte("ghost"), 0); err == nil {
		t.Fatal("the lost claim's token still writes")
	}
	if err := s.Complete(ctx, again.Hold, []byte("ok"), 0); err != nil {
		t.Fatal(err)
	}
}

// droppingClient is a client to srv through a replyDropper: no retries,
// and a lost reply is an error after 300 ms.
func droppingClient(t *testing.T, srv *redistest.Server) (*replyDropper, *redis.Client) {
	t.Helper()
	proxy := newReplyDropper(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.addr, MaxRetries: -1, ReadTimeout: 300 * time.Millisecond})
	t.Cleanup(func() { rdb.Close() })
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	return proxy, rdb
}

// dropFirstClaimReply swallows the reply to the first SET the client sends.
type dropFirstClaimReply struct {
	proxy *replyDropper
	once  sync.Once
}

func (d *dropFirstClaimReply) DialHook(next redis.DialHook) redis.DialHook { return next }
func (d *dropFirstClaimReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() != "set" {
			return next(ctx, cmd)
		}
		dropped := false
		d.once.Do(func() { d.proxy.drop.Store(true); dropped = true })
		err := next(ctx, cmd)
		if dropped {
			d.proxy.drop.Store(false)
		}
		return err
	}
}
func (d *dropFirstClaimReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// The same through asynq: the reply to the middleware's claim is lost, the
// handler does not run, asynq retries the task, and the retry (same task,
// same process) runs it at once instead of waiting out the 60 s lease.
func TestMiddlewareRetakesLostClaim(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	proxy, rdb := droppingClient(t, srv)
	rdb.AddHook(&dropFirstClaimReply{proxy: proxy})
	s, rec := newStore(t, rdb, fullRecords)
	m := newMiddleware(t, s, dedup.MiddlewareOptions{Lease: time.Minute})

	var e effect
	runPayment(t, srv, m, "lost-1", e.handler("charged"))
	waitFor(t, func() bool { return e.n.Load() == 1 })
	r, err := s.Status(context.Background(), dedup.Key{Namespace: "payment:charge", ID: "lost-1"})
	if err != nil || r.State != dedup.StatusRunning && r.State != dedup.StatusDone || rec.Count("error") != 1 {
		t.Fatalf("after the retry: %+v %v, %d claim errors (want the one lost reply)", r, err, rec.Count("error"))
	}
	if rec.Count("in_progress") != 0 {
		t.Fatal("the retry of the same task waited on its own lost claim")
	}
}

// runPayment enqueues payment id straight on srv and works it with h
// behind m, retrying at once; it returns the task's id.
func runPayment(t *testing.T, srv *redistest.Server, m *dedup.Middleware, id string, h asynq.Handler) string {
	t.Helper()
	asynqRDB := srv.Client(t)
	info, err := asynq.NewClientFromRedisClient(asynqRDB).Enqueue(asynq.NewTask("payment:charge", []byte(`{"id":"`+id+`"}`)))
	if err != nil {
		t.Fatal(err)
	}
	aq := asynq.NewServerFromRedisClient(asynqRDB, asynq.Config{
		Concurrency: 2, LogLevel: asynq.FatalLevel, TaskCheckInterval: 10 * time.Millisecond,
		DelayedTaskCheckInterval: 10 * time.Millisecond, IsFailure: dedup.IsFailure,
		RetryDelayFunc: dedup.RetryDelay(func(int, error, *asynq.Task) time.Duration { return 10 * time.Millisecond }),
	})
	mux := asynq.NewServeMux()
	mux.Use(m.Wrap)
	mux.Handle("payment:charge", h)
	if err := aq.Start(mux); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(aq.Shutdown)
	return info.ID
}

// dropArmedReply swallows the reply to the first command that match takes
// once armed.
type dropArmedReply struct {
	proxy *replyDropper
	match func(redis.Cmder) bool
	armed atomic.Bool
	fired atomic.Bool
}

func (d *dropArmedReply) DialHook(next redis.DialHook) redis.DialHook { return next }
func (d *dropArmedReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !d.match(cmd) || !d.armed.CompareAndSwap(true, false) {
			return next(ctx, cmd)
		}
		d.fired.Store(true)
		d.proxy.drop.Store(true)
		defer d.proxy.drop.Store(false)
		return next(ctx, cmd)
	}
}
func (d *dropArmedReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// The reply to a completion is lost after Redis wrote it: the middleware's
// retry finds the record done by its own hold and is done, instead of
// hearing "lease lost" (counted, logged, and the task failed for asynq to
// retry) about its own write.
func TestLostCompletionReplyIsNoLeaseLost(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	proxy, rdb := droppingClient(t, srv)
	drop := &dropArmedReply{proxy: proxy, match: func(c redis.Cmder) bool { return c.Name() == "evalsha" }}
	rdb.AddHook(drop)
	s, rec := newStore(t, rdb, storage.Options{})
	// Redis knows the completion's script from here: a lost EVALSHA reply
	// is then a write, not a NOSCRIPT that ran nothing.
	warm := mustClaim(t, s, dedup.Key{Namespace: "payment:charge", ID: "warm"}, "", time.Minute, dedup.Acquired)
	if err := s.Complete(context.Background(), warm.Hold, nil, 0); err != nil {
		t.Fatal(err)
	}
	m := newMiddleware(t, s, dedup.MiddlewareOptions{Lease: time.Minute})
	var runs atomic.Int64
	id := runPayment(t, srv, m, "lost-2", asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		runs.Add(1)
		dedup.SetResult(ctx, []byte("charged"))
		drop.armed.Store(true) // the completion is the next script
		return nil
	}))
	// Until asynq has the task done (the run succeeded), or the lease was
	// called lost.
	insp := asynq.NewInspectorFromRedisClient(srv.Client(t))
	waitFor(t, func() bool {
		_, err := insp.GetTaskInfo("default", id)
		return rec.Count("lease_lost") > 0 || errors.Is(err, asynq.ErrTaskNotFound)
	})
	r, err := s.Status(context.Background(), dedup.Key{Namespace: "payment:charge", ID: "lost-2"})
	if err != nil || r.State != dedup.StatusDone || string(r.Result) != "charged" {
		t.Fatalf("record %+v %v, want done with its result", r, err)
	}
	if n := rec.Count("lease_lost"); n != 0 || rec.Count("error") != 1 || runs.Load() != 1 {
		t.Fatalf("%d lease_lost, %d errors, %d runs: want the one lost reply, no lease lost, one run", n, rec.Count("error"), runs.Load())
	}
}

// The same for a joined acknowledgement: Redis ran onceq's completion and
// asynq's acknowledgement, the reply was lost, and the completion retried
// alone finds the record done by its own hold instead of a lost lease.
func TestLostJoinedAckReplyIsNoLeaseLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t)
	proxy, wrdb := droppingClient(t, srv)
	// The joined acknowledgement is the script with a queue's active list
	// and a record among its keys.
	drop := &dropArmedReply{proxy: proxy, match: func(c redis.Cmder) bool {
		has := func(suffix string) bool {
			return slices.ContainsFunc(c.Args(), func(a any) bool {
				s, _ := a.(string)
				return strings.HasSuffix(s, suffix)
			})
		}
		return c.Name() == "evalsha" && has("}:active") && has(":rec")
	}}
	wrdb.AddHook(drop)
	kind, catalog := noteKind(t, false)
	store, rec := newStore(t, wrdb, storage.Options{})
	w, err := dedup.NewServer(wrdb, store, asynq.Config{Concurrency: 2, LogLevel: asynq.FatalLevel},
		dedup.MiddlewareOptions{Catalog: catalog})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	mux := asynq.NewServeMux()
	mux.Handle(kind.Type, dedup.Handle(kind, func(_ context.Context, n note) (string, error) {
		runs.Add(1)
		// Not the first job's: Redis learns the joined script from it, so
		// the lost reply is a write, not a NOSCRIPT that ran nothing.
		drop.armed.Store(n.ID == "lost-ack")
		return "noted", nil
	}))
	if err := w.Start(mux); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Shutdown(ctx) })
	rdb := srv.Client(t)
	producer, err := dedup.NewProducer(rdb, nil, dedup.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"warm", "lost-ack"} {
		j := kind.Job(note{ID: id})
		if _, err := producer.Enqueue(ctx, j); err != nil {
			t.Fatal(err)
		}
		if st, err := producer.Wait(ctx, j, 20*time.Second); err != nil || st.State != dedup.StatusDone {
			t.Fatalf("job %s: %s %v, want done", id, st.State, err)
		}
	}
	// The completion retried alone comes 300 ms after the lost reply.
	waitFor(t, func() bool { return drop.fired.Load() })
	time.Sleep(time.Second)
	if !drop.fired.Load() || rec.Count("lease_lost") != 0 || runs.Load() != 2 {
		t.Fatalf("reply dropped %v, %d lease_lost, %d runs: want the joined reply lost, no lease lost, two runs",
			drop.fired.Load(), rec.Count("lease_lost"), runs.Load())
	}
}
