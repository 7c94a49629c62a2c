package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/dedup/storage"
)

// ClusterResult is how one job type's commands spread over the masters of
// a Redis Cluster (-cluster), and what a task costs there in round trips.
type ClusterResult struct {
	Jobs        int     `json:"jobs"`
	Concurrency int     `json:"concurrency"`
	Queues      int     `json:"queues"` // asynq queues the one job type is spread over: its home queues
	JobsPerSec  float64 `json:"jobs_per_sec"`
	// TaskPathTripsPerTask: the worker's round trips on a task's path (as
	// in the single-Redis rows: dequeue, acknowledgement, calls with the
	// task's context), per task.
	TaskPathTripsPerTask float64 `json:"task_path_trips_per_task"`
	// RedisUsPerTask: the masters' CPU (user + sys) per job, enqueue and
	// processing together, background included.
	RedisUsPerTask float64       `json:"redis_us_per_task"`
	Masters        []MasterShare `json:"masters"`
	Load           float64       `json:"load_avg_1m"`
}

// MasterShare is the commands one master ran (INFO commandstats, without
// the bench's INFO and the client's CLUSTER calls).
type MasterShare struct {
	Addr     string `json:"addr"`
	Commands int64  `json:"commands"`
}

func (c ClusterResult) total() int64 {
	var n int64
	for _, m := range c.Masters {
		n += m.Commands
	}
	return n
}

// BusiestShare is the busiest master's part of all commands, 0..1.
func (c ClusterResult) BusiestShare() float64 {
	t := c.total()
	if t == 0 {
		return 0
	}
	return float64(slices.MaxFunc(c.Masters, func(a, b MasterShare) int { return int(a.Commands - b.Commands) }).Commands) / float64(t)
}

func (c ClusterResult) detail() string {
	var parts []string
	for _, m := range c.Masters {
		parts = append(parts, fmt.Sprintf("%d", m.Commands))
	}
	return fmt.Sprintf("%d jobs, commands per master %s; %.2f round trips per task on its path; Redis CPU %.0f µs per job",
		c.Jobs, strings.Join(parts, " / "), c.TaskPathTripsPerTask, c.RedisUsPerTask)
}

// localCluster is three redis-servers this program started, joined into a
// cluster with redis-cli.
type localCluster struct {
	srvs  []*redistest.Server
	addrs []string
}

func startCluster(ctx context.Context, ports redistest.Ports) (*localCluster, error) {
	if _, err := exec.LookPath("redis-cli"); err != nil {
		return nil, fmt.Errorf("-cluster needs redis-cli on PATH to create the cluster")
	}
	c := &localCluster{}
	for range 3 {
		dir, err := os.MkdirTemp("", "onceq-bench-cluster-")
		if err != nil {
			c.Close()
			return nil, err
		}
		s, err := redistest.LaunchInRange(dir, ports, "--appendonly", "no", "--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000")
		if err != nil {
			os.RemoveAll(dir)
			c.Close()
			return nil, err
		}
		c.srvs, c.addrs = append(c.srvs, s), append(c.addrs, s.Addr)
	}
	args := append([]string{"--cluster", "create"}, c.addrs...)
	if out, err := exec.CommandContext(ctx, "redis-cli", append(args, "--cluster-replicas", "0", "--cluster-yes")...).CombinedOutput(); err != nil {
		c.Close()
		return nil, fmt.Errorf("create cluster: %v\n%s", err, out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, a := range c.addrs {
		rdb := redis.NewClient(&redis.Options{Addr: a})
		for {
			info, err := rdb.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				rdb.Close()
				c.Close()
				return nil, fmt.Errorf("cluster not ok on %s: %v %s", a, err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
		rdb.Close()
	}
	return c, nil
}

func (c *localCluster) Close() {
	for _, s := range c.srvs {
		s.Stop()
		os.RemoveAll(s.Dir)
	}
}

// commands reads every master's command calls, and the CPU all of them
// have used.
func (c *localCluster) commands(ctx context.Context) ([]int64, time.Duration, error) {
	out := make([]int64, len(c.addrs))
	var cpu time.Duration
	for i, a := range c.addrs {
		rdb := redis.NewClient(&redis.Options{Addr: a})
		info, err := rdb.Info(ctx, "commandstats", "cpu").Result()
		rdb.Close()
		if err != nil {
			return nil, 0, fmt.Errorf("%s: %w", a, err)
		}
		st := parseStats(info)
		for name, n := range st.calls {
			if name != "info" && name != "cluster" {
				out[i] += n
			}
		}
		cpu += st.cpu
	}
	return out, cpu, nil
}

// cluster enqueues N jobs of one type on one queue through the Producer
// and processes them with onceq's server (c=10), all on a cluster client,
// and counts the commands each master ran meanwhile and the worker's round
// trips on each task's path.
func (b *bench) cluster(ctx context.Context) (ClusterResult, error) {
	lc, err := startCluster(ctx, b.cfg.Ports)
	if err != nil {
		return ClusterResult{}, err
	}
	defer lc.Close()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: lc.addrs})
	defer rdb.Close()
	store, err := dedup.NewRedisStore(rdb, storage.Options{})
	if err != nil {
		return ClusterResult{}, err
	}
	n := b.cfg.N
	// One job type on one queue: its keys' homes spread it (dedup/shard.go).
	q := b.queue("c")
	cat, err := dedup.NewCatalog(dedup.Define(dedup.Spec[benchEmail]{Type: b.taskType, Queue: q,
		ID: func(e benchEmail) string { return e.ID }}).Kind)
	if err != nil {
		return ClusterResult{}, err
	}
	trips := &tripCounter{}
	rdb.AddHook(trips)
	res := ClusterResult{Jobs: n, Concurrency: e2eConc, Queues: len(dedup.ClusterQueues(q)) - 1}
	var count, last atomic.Int64
	done := make(chan struct{})
	mux := asynq.NewServeMux()
	mux.HandleFunc(b.taskType, func(context.Context, *asynq.Task) error {
		last.Store(time.Now().UnixNano())
		if count.Add(1) == int64(n) {
			close(done)
		}
		return nil
	})
	srv, err := dedup.NewServer(rdb, store, asynq.Config{Concurrency: e2eConc, Queues: map[string]int{q: 1},
		TaskCheckInterval: taskCheck, Logger: quietLogger{w: b.cfg.warn}, LogLevel: asynq.WarnLevel}, dedup.MiddlewareOptions{Catalog: cat})
	if err != nil {
		return res, err
	}
	prod, err := dedup.NewProducer(rdb, store, dedup.ProducerOptions{Catalog: cat})
	if err != nil {
		return res, err
	}
	before, cpu0, err := lc.commands(ctx)
	if err != nil {
		return res, err
	}
	start := time.Now()
	if err := srv.Start(mux); err != nil {
		return res, err
	}
	defer srv.Shutdown(context.WithoutCancel(ctx))
	if err := parallel(n, e2eConc, func(i int) error {
		_, p := b.payload(q, i)
		j, err := cat.Build(b.taskType, p, "", "")
		if err != nil {
			return err
		}
		o, err := prod.Enqueue(ctx, j)
		if err == nil && o.Decision != dedup.Enqueued {
			err = fmt.Errorf("cluster enqueue %s: %s %s", j.Key, o.Decision, o.Reason)
		}
		return err
	}); err != nil {
		return res, err
	}
	select {
	case <-done:
	case <-time.After(b.cfg.SideTimeout):
		return res, fmt.Errorf("cluster: %w: %d of %d", errNotAll, count.Load(), n)
	case <-ctx.Done():
		return res, ctx.Err()
	}
	res.JobsPerSec = float64(n) / time.Unix(0, last.Load()).Sub(start).Seconds()
	_, task := trips.load()
	res.TaskPathTripsPerTask = float64(task) / float64(n)
	after, cpu1, err := lc.commands(ctx)
	if err != nil {
		return res, err
	}
	res.RedisUsPerTask = float64((cpu1 - cpu0).Microseconds()) / float64(n)
	for i, a := range lc.addrs {
		res.Masters = append(res.Masters, MasterShare{Addr: a, Commands: after[i] - before[i]})
	}
	res.Load = loadAvg()
	b.logf("%-28s %.0f jobs/s, busiest master %.0f %% of commands, %.2f task-path trips per task, %.0f µs Redis CPU per job", "cluster 3 masters",
		res.JobsPerSec, 100*res.BusiestShare(), res.TaskPathTripsPerTask, res.RedisUsPerTask)
	return res, nil
}
