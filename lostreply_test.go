package onceq_test

import (
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/internal/redistest"
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
	s, _ := newStore(t, rdb, onceq.StoreOptions{})
	direct, _ := newStore(t, srv.Client(t), onceq.StoreOptions{})
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
	if err != nil || r.State != onceq.StatusRunning || r.Owner != "boot-1/task-7" {
		t.Fatalf("Redis should have run the lost claim: %+v %v", r, err)
	}
	lost := onceq.Hold{Key: k, Token: r.Token, Owner: r.Owner}

	start := time.Now()
	other, err := s.Claim(ctx, k, "fp", time.Minute, "boot-2/task-7")
	if err != nil || other.Outcome != onceq.InProgress || time.Until(other.LeaseUntil) < 50*time.Second {
		t.Fatalf("another delivery: %+v %v, want in progress for about a minute", other, err)
	}
	again, err := s.Claim(ctx, k, "fp", time.Minute, mine)
	if err != nil || again.Outcome != onceq.Acquired || again.Hold.Token <= lost.Token {
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
	proxy := newReplyDropper(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.addr, MaxRetries: -1, ReadTimeout: 300 * time.Millisecond})
	t.Cleanup(func() { rdb.Close() })
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	rdb.AddHook(&dropFirstClaimReply{proxy: proxy})
	s, rec := newStore(t, rdb, onceq.StoreOptions{})
	m := newMiddleware(t, s, onceq.MiddlewareOptions{Lease: time.Minute})

	asynqRDB := srv.Client(t)
	if _, err := asynq.NewClientFromRedisClient(asynqRDB).Enqueue(asynq.NewTask("payment:charge", []byte(`{"id":"lost-1"}`))); err != nil {
		t.Fatal(err)
	}
	aq := asynq.NewServerFromRedisClient(asynqRDB, asynq.Config{
		Concurrency: 2, LogLevel: asynq.FatalLevel, TaskCheckInterval: 10 * time.Millisecond,
		DelayedTaskCheckInterval: 10 * time.Millisecond, IsFailure: onceq.IsFailure,
		RetryDelayFunc: onceq.RetryDelay(func(int, error, *asynq.Task) time.Duration { return 10 * time.Millisecond }),
	})
	var e effect
	mux := asynq.NewServeMux()
	mux.Use(m.Wrap)
	mux.Handle("payment:charge", e.handler("charged"))
	if err := aq.Start(mux); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(aq.Shutdown)
	waitFor(t, func() bool { return e.n.Load() == 1 })
	r, err := s.Status(context.Background(), onceq.Key{Namespace: "payment:charge", ID: "lost-1"})
	if err != nil || r.State != onceq.StatusRunning && r.State != onceq.StatusDone || rec.Count("error") != 1 {
		t.Fatalf("after the retry: %+v %v, %d claim errors (want the one lost reply)", r, err, rec.Count("error"))
	}
	if rec.Count("in_progress") != 0 {
		t.Fatal("the retry of the same task waited on its own lost claim")
	}
}
