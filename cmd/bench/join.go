package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/storage"
)

// The join phase decides whether the worker's join (its claim riding
// asynq's dequeue, its completion asynq's acknowledgement) pays for itself:
// a dedup.Server (joined) against asynq's own server running the same
// handler inside dedup.Middleware (claim and completion as calls of their
// own), in paired rounds, over loopback and through a proxy that holds each
// chunk for a delay (this kernel has no netem).

// JoinRow is one pairing of the join phase, medians over the rounds.
type JoinRow struct {
	Network     string  `json:"network"` // "loopback" or "proxy +<delay> each way"
	Concurrency int     `json:"concurrency"`
	Ratio       float64 `json:"throughput_joined_over_plain"`
	JoinedRate  float64 `json:"joined_tasks_per_s"`
	PlainRate   float64 `json:"plain_tasks_per_s"`
	// P50Saved and P99Saved are how much sooner a handler starts after
	// its enqueue with the join (plain minus joined), ms.
	P50Saved float64 `json:"p50_start_saved_ms"`
	P99Saved float64 `json:"p99_start_saved_ms"`
	// CPU per task of this process and of Redis, µs.
	JoinedCPU, PlainCPU           float64 `json:"-"`
	JoinedRedisCPU, PlainRedisCPU float64 `json:"-"`
}

// joinSample is one measurement of one side.
type joinSample struct {
	rate, goCPU, redisCPU float64
	p50, p99              float64 // enqueue to handler start, ms
}

// joins measures both sides at each concurrency, over loopback and through
// a proxy delaying each chunk by delay (none when 0).
func (b *bench) joins(ctx context.Context, delay time.Duration) ([]JoinRow, error) {
	nets := []time.Duration{0}
	if delay > 0 {
		nets = append(nets, delay)
	}
	var rows []JoinRow
	for _, d := range nets {
		addr, network := b.env.opt.Addr, "loopback"
		if d > 0 {
			p, err := newDelayProxy(b.env.opt.Addr, d)
			if err != nil {
				return nil, err
			}
			defer p.Close()
			addr, network = p.Addr().String(), "proxy +"+d.String()+" each way"
		}
		for _, conc := range b.cfg.Conc {
			got := map[string][]joinSample{}
			for r := range b.cfg.Rounds {
				for _, side := range rotate([]string{"joined", "plain"}, r) {
					s, err := b.joinSample(ctx, addr, side, conc)
					if err != nil {
						return nil, fmt.Errorf("%s %s c=%d: %w", network, side, conc, err)
					}
					got[side] = append(got[side], s)
					b.logf("join %s c=%d round %d %s: %.0f tasks/s, start p50 %.2f ms p99 %.2f ms, CPU %.0f µs + Redis %.0f µs per task",
						network, conc, r, side, s.rate, s.p50, s.p99, s.goCPU, s.redisCPU)
				}
			}
			j, p := got["joined"], got["plain"]
			ratios := make([]float64, len(j))
			for i := range j {
				ratios[i] = j[i].rate / p[i].rate
			}
			med := func(s []joinSample, f func(joinSample) float64) float64 {
				v := make([]float64, len(s))
				for i := range s {
					v[i] = f(s[i])
				}
				return median(v)
			}
			rows = append(rows, JoinRow{Network: network, Concurrency: conc, Ratio: median(ratios),
				JoinedRate: med(j, func(s joinSample) float64 { return s.rate }), PlainRate: med(p, func(s joinSample) float64 { return s.rate }),
				P50Saved:  med(p, func(s joinSample) float64 { return s.p50 }) - med(j, func(s joinSample) float64 { return s.p50 }),
				P99Saved:  med(p, func(s joinSample) float64 { return s.p99 }) - med(j, func(s joinSample) float64 { return s.p99 }),
				JoinedCPU: med(j, func(s joinSample) float64 { return s.goCPU }), PlainCPU: med(p, func(s joinSample) float64 { return s.goCPU }),
				JoinedRedisCPU: med(j, func(s joinSample) float64 { return s.redisCPU }), PlainRedisCPU: med(p, func(s joinSample) float64 { return s.redisCPU })})
		}
	}
	return rows, nil
}

// joinSample processes N pre-enqueued tasks on one side, then times 300
// enqueues, one at a time, to their handler's start.
func (b *bench) joinSample(ctx context.Context, addr, side string, conc int) (joinSample, error) {
	queue := b.queue("join")
	defer b.cleanup(context.WithoutCancel(ctx), queue)
	if err := b.fill(ctx, sideOnceq, queue, b.cfg.N, 0); err != nil {
		return joinSample{}, err
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 4 * conc})
	defer rdb.Close()
	store, err := dedup.NewRedisStore(rdb, storage.Options{})
	if err != nil {
		return joinSample{}, err
	}
	cfg := asynq.Config{Concurrency: conc, Queues: map[string]int{queue: 1}, TaskCheckInterval: time.Millisecond,
		Logger: quietLogger{w: b.cfg.warn}, LogLevel: asynq.WarnLevel}
	var srv server
	if side == "joined" {
		if srv, err = dedup.NewServer(rdb, store, cfg, dedup.MiddlewareOptions{Catalog: benchCatalog(b.taskType, queue, false, b.cfg.History)}); err != nil {
			return joinSample{}, err
		}
	} else {
		mw, err := dedup.NewMiddleware(store, dedup.MiddlewareOptions{Catalog: benchCatalog(b.taskType, queue, false, b.cfg.History)})
		if err != nil {
			return joinSample{}, err
		}
		srv = wrappedServer{asynq.NewServerFromRedisClient(rdb, dedup.ServerConfig(cfg)), mw}
	}
	var (
		count  atomic.Int64
		done   = make(chan struct{})
		mu     sync.Mutex
		starts = map[string]time.Time{}
		timing atomic.Bool
	)
	mux := asynq.NewServeMux()
	mux.HandleFunc(b.taskType, func(ctx context.Context, _ *asynq.Task) error {
		if timing.Load() {
			id, _ := asynq.GetTaskID(ctx)
			mu.Lock()
			starts[id] = time.Now()
			mu.Unlock()
			return nil
		}
		if count.Add(1) == int64(b.cfg.N) {
			close(done)
		}
		return nil
	})
	r0, err := b.env.stats(ctx)
	if err != nil {
		return joinSample{}, err
	}
	c0, t0 := processCPU(), time.Now()
	if err := srv.Start(mux); err != nil {
		return joinSample{}, err
	}
	defer srv.Shutdown(context.WithoutCancel(ctx))
	select {
	case <-done:
	case <-time.After(b.cfg.SideTimeout):
		return joinSample{}, fmt.Errorf("%d of %d tasks in %s", count.Load(), b.cfg.N, b.cfg.SideTimeout)
	}
	elapsed, c1 := time.Since(t0), processCPU()
	r1, err := b.env.stats(ctx)
	if err != nil {
		return joinSample{}, err
	}
	n := float64(b.cfg.N)
	s := joinSample{rate: n / elapsed.Seconds(), goCPU: float64((c1 - c0).Microseconds()) / n,
		redisCPU: float64((r1.cpu - r0.cpu).Microseconds()) / n}

	timing.Store(true)
	prod, err := dedup.NewProducer(b.env.admin, nil, dedup.ProducerOptions{})
	if err != nil {
		return joinSample{}, err
	}
	var lat []float64
	for i := range 300 {
		j, err := b.job(queue, b.cfg.N+i)
		if err != nil {
			return joinSample{}, err
		}
		if _, err := prod.Enqueue(ctx, j); err != nil {
			return joinSample{}, err
		}
		enq := time.Now()
		for deadline := enq.Add(10 * time.Second); ; time.Sleep(50 * time.Microsecond) {
			mu.Lock()
			st, ok := starts[j.Key.TaskID()]
			mu.Unlock()
			if ok {
				lat = append(lat, float64(st.Sub(enq).Microseconds())/1000)
				break
			}
			if time.Now().After(deadline) {
				return joinSample{}, fmt.Errorf("task %s did not start", j.Key)
			}
		}
	}
	s.p50, s.p99 = median(lat), quantile(lat, 0.99)
	return s, nil
}

// wrappedServer is asynq's own server with the Middleware around its
// handler: claim and completion as calls of their own.
type wrappedServer struct {
	srv *asynq.Server
	mw  *dedup.Middleware
}

func (w wrappedServer) Start(h asynq.Handler) error { return w.srv.Start(w.mw.Wrap(h)) }

func (w wrappedServer) Shutdown(ctx context.Context) error {
	w.srv.Shutdown()
	return w.mw.Shutdown(ctx)
}

// delayProxy forwards loopback connections to a backend, holding each
// chunk it reads, either way, for delay: Redis one slow hop away.
type delayProxy struct {
	net.Listener
	wg sync.WaitGroup
}

func newDelayProxy(backend string, delay time.Duration) (*delayProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &delayProxy{Listener: ln}
	p.wg.Go(func() {
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
			pipe := func(dst, src net.Conn) {
				buf := make([]byte, 64<<10)
				for {
					n, err := src.Read(buf)
					if n > 0 {
						time.Sleep(delay)
						if _, werr := dst.Write(buf[:n]); werr != nil {
							break
						}
					}
					if err != nil {
						break
					}
				}
				dst.Close()
				src.Close()
			}
			p.wg.Go(func() { pipe(s, c) })
			p.wg.Go(func() { pipe(c, s) })
		}
	})
	return p, nil
}

// Close stops accepting; the pairs end as their clients close.
func (p *delayProxy) Close() error { return p.Listener.Close() }

// printJoins writes the join phase's table.
func printJoins(w io.Writer, rows []JoinRow) {
	fmt.Fprintln(w, "| network | c | tasks/s joined | tasks/s plain | joined / plain | handler start p50, p99 saved | CPU per task, this process + Redis: joined, plain |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- | --- |")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %d | %.0f | %.0f | %.2f | %.2f ms, %.2f ms | %.0f + %.0f µs, %.0f + %.0f µs |\n",
			r.Network, r.Concurrency, r.JoinedRate, r.PlainRate, r.Ratio, r.P50Saved, r.P99Saved,
			r.JoinedCPU, r.JoinedRedisCPU, r.PlainCPU, r.PlainRedisCPU)
	}
}
