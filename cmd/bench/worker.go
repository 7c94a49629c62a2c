package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/storage"
)

// Sides of the processing comparison.
const (
	sideBare     = "asynq"    // plain tasks, no-op handler
	sideRetained = "asynq+id" // tasks with TaskID + Retention, as asynq users dedup them, no middleware
	sideOnceq    = "onceq"    // producer-enqueued tasks, handler inside dedup.Middleware, as cmd/worker runs them
	// sideShown is onceq with its completed tasks kept for the dashboard
	// (Spec.WriteResult, as cmd/worker's task types): the memory sample only.
	sideShown = "onceq+shown"
	taskCheck = 10 * time.Millisecond
)

// workerHost is what runs asynq servers: this process, or a worker
// subprocess. One client, shared by asynq and the RedisStore as cmd/worker
// shares it, carries the round-trip hook.
type workerHost struct {
	rdb   *redis.Client
	trips *tripCounter
	store storage.Store
	warn  io.Writer
}

func newWorkerHost(env *redisEnv, warn io.Writer) (*workerHost, error) {
	trips := &tripCounter{}
	rdb := env.client(trips)
	store, err := dedup.NewRedisStore(rdb, storage.Options{})
	if err != nil {
		rdb.Close()
		return nil, err
	}
	return &workerHost{rdb: rdb, trips: trips, store: store, warn: warn}, nil
}

func (h *workerHost) Close() { h.rdb.Close() }

// serverRun is one asynq server processing one queue until stopped.
type serverRun struct {
	srv    server
	mux    *asynq.ServeMux
	host   *workerHost
	side   string
	count  atomic.Int64
	last   atomic.Int64 // unix ns when the latest handler returned
	target int64
	done   chan struct{} // closed when count reaches target (if > 0)
	// result, when set before start, is what every handler hands onceq to
	// keep in the job's record (dedup.SetResult).
	result []byte
	// wait, when set before start, is how long every handler waits, as on
	// a downstream's round trip: the realistic handler beside the no-op one.
	wait time.Duration
	once sync.Once
}

// prepare builds a server for side on queue; Start runs it.
func (h *workerHost) prepare(side, queue, taskType string, concurrency int, target int64) (*serverRun, error) {
	r := &serverRun{host: h, side: side, target: target, done: make(chan struct{})}
	r.mux = asynq.NewServeMux()
	var err error
	var cat *dedup.Catalog
	if side == sideShown {
		cat = benchCatalog(taskType, queue, true, false)
	}
	r.srv, err = newServer(side == sideOnceq || side == sideShown, cat, h.rdb, h.store, asynq.Config{
		Concurrency:       concurrency,
		Queues:            map[string]int{queue: 1},
		TaskCheckInterval: taskCheck,
		Logger:            quietLogger{w: h.warn},
		LogLevel:          asynq.WarnLevel,
	})
	if err != nil {
		return nil, err
	}
	r.mux.HandleFunc(taskType, func(ctx context.Context, _ *asynq.Task) error {
		if r.wait > 0 {
			time.Sleep(r.wait)
		}
		if r.result != nil {
			dedup.SetResult(ctx, r.result)
		}
		n := r.count.Add(1)
		r.last.Store(time.Now().UnixNano())
		if n == r.target {
			close(r.done)
		}
		return nil
	})
	return r, nil
}

// start runs the server's goroutines under the pprof label side=<side>, so
// one -cpuprofile splits by side: go tool pprof -tagfocus side=onceq.
func (r *serverRun) start() (err error) {
	pprof.Do(context.Background(), pprof.Labels("side", r.side), func(context.Context) {
		err = r.srv.Start(r.mux)
	})
	return err
}

// stop shuts the server down; later calls do nothing.
func (r *serverRun) stop() {
	r.once.Do(func() { _ = r.srv.Shutdown(context.Background()) })
}

// server is an dedup.Server or a bare asynq one.
type server interface {
	Start(asynq.Handler) error
	Shutdown(context.Context) error
}

type bareServer struct{ *asynq.Server }

func (b bareServer) Shutdown(context.Context) error { b.Server.Shutdown(); return nil }

// newServer is onceq's server (with onceq, and the type options of cat,
// which may be nil) or asynq's own on rdb.
func newServer(withOnceq bool, cat *dedup.Catalog, rdb redis.UniversalClient, store storage.Store, cfg asynq.Config) (server, error) {
	if withOnceq {
		return dedup.NewServer(rdb, store, cfg, dedup.MiddlewareOptions{Catalog: cat})
	}
	return bareServer{asynq.NewServerFromRedisClient(rdb, cfg)}, nil
}

// quietLogger keeps asynq's warnings and errors, drops the chatter.
type quietLogger struct{ w io.Writer }

func (l quietLogger) Debug(...any)   {}
func (l quietLogger) Info(...any)    {}
func (l quietLogger) Warn(a ...any)  { fmt.Fprintln(l.w, append([]any{"asynq warn:"}, a...)...) }
func (l quietLogger) Error(a ...any) { fmt.Fprintln(l.w, append([]any{"asynq error:"}, a...)...) }
func (l quietLogger) Fatal(a ...any) {
	fmt.Fprintln(l.w, append([]any{"asynq fatal:"}, a...)...)
	os.Exit(1)
}
