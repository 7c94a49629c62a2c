package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup/oncetest/redistest"
)

// redisEnv is the one Redis a run measures against: a redis-server this
// program started (killed at the end) or a given one, which is never flushed:
// the run uses its own queue names and key namespace and deletes its keys.
type redisEnv struct {
	URL     string
	Own     bool
	Version string
	admin   *redis.Client // setup, INFO and cleanup: not counted
	opt     *redis.Options
	srv     *redistest.Server // nil for a given server
	// network says how the server is reached when not over loopback
	// (-netns); teardown stops such a server and removes what it needed.
	network  string
	teardown func()
}

// startRedis launches redis-server on a free loopback port of ports,
// without persistence, as a child that dies with this process.
func startRedis(ctx context.Context, ports redistest.Ports) (*redisEnv, error) {
	dir, err := os.MkdirTemp("", "onceq-bench-")
	if err != nil {
		return nil, err
	}
	srv, err := redistest.LaunchInRange(dir, ports, "--appendonly", "no")
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("%w (install redis-server, or pass -redis-url)", err)
	}
	e := &redisEnv{Own: true, srv: srv, URL: "redis://" + srv.Addr + "/0"}
	if err := e.connect(ctx); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// openRedis uses a given server.
func openRedis(ctx context.Context, url string) (*redisEnv, error) {
	e := &redisEnv{URL: url}
	if err := e.connect(ctx); err != nil {
		return nil, err
	}
	return e, nil
}

func (e *redisEnv) connect(ctx context.Context) error {
	opt, err := redis.ParseURL(e.URL)
	if err != nil {
		return fmt.Errorf("redis url: %w", err)
	}
	e.opt = opt
	e.admin = redis.NewClient(opt)
	deadline := time.Now().Add(10 * time.Second)
	for {
		err = e.admin.Ping(ctx).Err()
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			e.admin.Close()
			return fmt.Errorf("redis at %s does not answer: %w", opt.Addr, err)
		}
	}
	info, err := e.admin.Info(ctx, "server").Result()
	if err != nil {
		return err
	}
	e.Version = infoField(info, "redis_version")
	return nil
}

// client returns a new client on the benchmark's server, with hook counting
// its round trips when hook is not nil.
func (e *redisEnv) client(hook *tripCounter) *redis.Client {
	c := redis.NewClient(e.opt)
	if hook != nil {
		c.AddHook(hook)
	}
	return c
}

// Close stops a server this program started; a given one is left as it was.
func (e *redisEnv) Close() {
	if e.admin != nil {
		e.admin.Close()
	}
	if e.srv != nil {
		e.srv.Stop()
		os.RemoveAll(e.srv.Dir)
	}
	if e.teardown != nil {
		e.teardown()
	}
}

// deleteMatching removes the keys matching each pattern (SCAN + UNLINK):
// the run's own keys, on any server.
func (e *redisEnv) deleteMatching(ctx context.Context, patterns ...string) error {
	for _, p := range patterns {
		iter := e.admin.Scan(ctx, 0, p, 2000).Iterator()
		batch := make([]string, 0, 1000)
		for iter.Next(ctx) {
			batch = append(batch, iter.Val())
			if len(batch) == cap(batch) {
				if err := e.admin.Unlink(ctx, batch...).Err(); err != nil {
					return err
				}
				batch = batch[:0]
			}
		}
		if err := iter.Err(); err != nil {
			return err
		}
		if len(batch) > 0 {
			if err := e.admin.Unlink(ctx, batch...).Err(); err != nil {
				return err
			}
		}
	}
	return nil
}

// dropQueue deletes a queue's keys (all behind its hash tag) and its entry in
// asynq's queue set.
func (e *redisEnv) dropQueue(ctx context.Context, queue string) error {
	if err := e.deleteMatching(ctx, "asynq:{"+queue+"}:*"); err != nil {
		return err
	}
	return e.admin.SRem(ctx, "asynq:queues", queue).Err()
}

// serverStats is a reading of INFO commandstats and cpu.
type serverStats struct {
	calls map[string]int64
	// scripts is the time Redis spent executing EVAL/EVALSHA (the commands
	// they run included), as commandstats' usec counts it.
	scripts time.Duration
	cpu     time.Duration
}

func (e *redisEnv) stats(ctx context.Context) (serverStats, error) {
	info, err := e.admin.Info(ctx, "commandstats", "cpu").Result()
	if err != nil {
		return serverStats{}, fmt.Errorf("redis info: %w", err)
	}
	return parseStats(info), nil
}

func parseStats(info string) serverStats {
	s := serverStats{calls: map[string]int64{}}
	scripts := map[string]bool{"cmdstat_eval": true, "cmdstat_evalsha": true, "cmdstat_eval_ro": true, "cmdstat_evalsha_ro": true}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		name, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch {
		case strings.HasPrefix(name, "cmdstat_"):
			for f := range strings.SplitSeq(rest, ",") {
				if v, ok := strings.CutPrefix(f, "calls="); ok {
					n, _ := strconv.ParseInt(v, 10, 64)
					s.calls[strings.TrimPrefix(name, "cmdstat_")] = n
				}
				if v, ok := strings.CutPrefix(f, "usec="); ok && scripts[name] {
					n, _ := strconv.ParseInt(v, 10, 64)
					s.scripts += time.Duration(n) * time.Microsecond
				}
			}
		case name == "used_cpu_sys" || name == "used_cpu_user":
			f, _ := strconv.ParseFloat(rest, 64)
			s.cpu += time.Duration(f * float64(time.Second))
		}
	}
	return s
}

// callsSince is the calls per command since an earlier reading, leaving out
// the INFO calls the benchmark itself makes.
func (s serverStats) callsSince(from serverStats) map[string]int64 {
	d := map[string]int64{}
	for name, n := range s.calls {
		if name == "info" {
			continue
		}
		if n -= from.calls[name]; n > 0 {
			d[name] = n
		}
	}
	return d
}

func infoField(info, field string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}
