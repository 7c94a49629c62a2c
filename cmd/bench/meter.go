package main

import (
	"context"
	"os"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// tripCounter is a go-redis hook counting round trips (one per command,
// one per pipeline) on the client the code under test uses, and the
// wrapped client the worker gives asynq. Trips on a
// task's path are also counted apart: a dequeue that got a task, the
// script that completes or retries it (its first key is the queue's active
// list), and every call made with a task's context (the middleware's claim
// and complete). The rest is per-process background: asynq's heartbeats,
// forwarder and idle polls, the middleware's lease heartbeat.
//
// A new pooled connection's handshake (HELLO, CLIENT SETINFO, AUTH, SELECT)
// is counted apart in conns: it happens once per connection, not per op.
type tripCounter struct{ n, task, conns atomic.Int64 }

func (c *tripCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *tripCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		switch {
		case isHandshake(cmd):
			c.conns.Add(1)
		case onTaskPath(ctx, cmd):
			c.task.Add(1)
			c.n.Add(1)
		default:
			c.n.Add(1)
		}
		return err
	}
}

func (c *tripCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		c.n.Add(1)
		// One trip, on the task's path if any command in it is.
		for _, cmd := range cmds {
			if onTaskPath(ctx, cmd) {
				c.task.Add(1)
				break
			}
		}
		return err
	}
}

func isHandshake(cmd redis.Cmder) bool {
	switch cmd.Name() {
	case "hello", "auth", "select", "client":
		return true
	}
	return false
}

func onTaskPath(ctx context.Context, cmd redis.Cmder) bool {
	if _, ok := asynq.GetTaskID(ctx); ok {
		return true
	}
	if n := cmd.Name(); n != "evalsha" && n != "eval" {
		return false
	}
	args := cmd.Args()
	if len(args) < 4 {
		return false
	}
	key, _ := args[3].(string)
	switch {
	case strings.HasSuffix(key, "}:pending"):
		// An empty queue polled: redis.Nil, or a nil value over RESP3.
		c, ok := cmd.(*redis.Cmd)
		if !ok {
			return false
		}
		v, err := c.Result()
		return err == nil && v != nil
	case strings.HasSuffix(key, "}:active"):
		return true
	}
	return false
}

// load reads the count; a nil counter (work done in subprocesses) reads 0.
func (c *tripCounter) load() (all, task int64) {
	if c == nil {
		return 0, 0
	}
	return c.n.Load(), c.task.Load()
}

// heapAllocs is how many heap objects this process has allocated so far.
func heapAllocs() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:objects"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// loadAvg is the machine's 1-minute load average (0 where /proc has none):
// on a shared machine it says how far to trust a round.
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, _, _ := strings.Cut(string(b), " ")
	l, _ := strconv.ParseFloat(f, 64)
	return l
}

// processCPU is this process's user+system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// sample is what one measured stretch cost: Ops operations (tasks processed
// or enqueues) in Elapsed, with the Go and Redis CPU, client round trips and
// Redis-side command calls they took.
type sample struct {
	Ops      int
	Elapsed  time.Duration
	GoCPU    time.Duration
	RedisCPU time.Duration
	Scripts  time.Duration // Redis time inside EVAL/EVALSHA
	Trips    int64         // all round trips
	TaskTrip int64         // round trips on a task's path (processing only)
	Allocs   uint64        // heap objects allocated by the Go process(es)
	Load     float64       // 1-minute load average at the end
	Calls    map[string]int64
}

// plus sums two stretches of the same side.
func (s sample) plus(o sample) sample {
	calls := make(map[string]int64, len(s.Calls)+len(o.Calls))
	for c, n := range s.Calls {
		calls[c] += n
	}
	for c, n := range o.Calls {
		calls[c] += n
	}
	return sample{Ops: s.Ops + o.Ops, Elapsed: s.Elapsed + o.Elapsed, GoCPU: s.GoCPU + o.GoCPU,
		RedisCPU: s.RedisCPU + o.RedisCPU, Scripts: s.Scripts + o.Scripts, Trips: s.Trips + o.Trips, TaskTrip: s.TaskTrip + o.TaskTrip,
		Allocs: s.Allocs + o.Allocs, Load: max(s.Load, o.Load), Calls: calls}
}

func (s sample) perSec() float64 { return float64(s.Ops) / s.Elapsed.Seconds() }

func (s sample) goUS() float64 { return float64(s.GoCPU.Microseconds()) / float64(s.Ops) }

func (s sample) redisUS() float64 { return float64(s.RedisCPU.Microseconds()) / float64(s.Ops) }

func (s sample) scriptUS() float64 { return float64(s.Scripts.Microseconds()) / float64(s.Ops) }

func (s sample) allocsPerOp() float64 { return float64(s.Allocs) / float64(s.Ops) }

// mark is a point in time to measure a stretch from.
type mark struct {
	at     time.Time
	cpu    time.Duration
	allocs uint64
	trips  int64
	task   int64
	srv    serverStats
}

// meter takes marks of the Go process, a trip counter and the Redis server.
type meter struct {
	env   *redisEnv
	trips *tripCounter
}

func (m meter) mark(ctx context.Context) (mark, error) {
	srv, err := m.env.stats(ctx)
	if err != nil {
		return mark{}, err
	}
	// Client-side readings last, closest to the work that follows.
	trips, task := m.trips.load()
	return mark{at: time.Now(), cpu: processCPU(), allocs: heapAllocs(), trips: trips, task: task, srv: srv}, nil
}

// since closes a stretch begun at from: the client side is read at once, the
// server after.
func (m meter) since(ctx context.Context, from mark, ops int) (sample, error) {
	at, cpu, allocs := time.Now(), processCPU(), heapAllocs()
	trips, task := m.trips.load()
	srv, err := m.env.stats(ctx)
	if err != nil {
		return sample{}, err
	}
	return sample{
		Ops:      ops,
		Elapsed:  at.Sub(from.at),
		GoCPU:    cpu - from.cpu,
		RedisCPU: srv.cpu - from.srv.cpu,
		Scripts:  srv.scripts - from.srv.scripts,
		Trips:    trips - from.trips,
		TaskTrip: task - from.task,
		Allocs:   allocs - from.allocs,
		Load:     loadAvg(),
		Calls:    srv.callsSince(from.srv),
	}, nil
}
