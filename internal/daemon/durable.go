package daemon

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNotReplicated: a write reached the master but fewer replicas than
// ONCEQ_REDIS_MIN_REPLICAS acknowledged it within the WAIT timeout. The
// write may be lost in a failover, so the caller treats it as failed (the
// producer does not report the job accepted, the worker retries).
var ErrNotReplicated = errors.New("redis: write not acknowledged by enough replicas")

// readOnly are the commands onceq and asynq send that change nothing; every
// other command is waited for. Over-waiting costs latency, under-waiting a
// lost write, hence a list of reads rather than of writes.
var readOnly = map[string]bool{
	"ping": true, "get": true, "mget": true, "hget": true, "hmget": true, "hgetall": true, "exists": true,
	"ttl": true, "pttl": true, "type": true, "scan": true, "sscan": true, "zscan": true, "hscan": true,
	"lrange": true, "llen": true, "lindex": true, "zrange": true, "zrangebyscore": true, "zcard": true,
	"zscore": true, "scard": true, "smembers": true, "sismember": true, "strlen": true, "info": true,
	"config": true, "memory": true, "client": true, "hello": true, "auth": true, "select": true,
	"script": true, "keys": true, "dbsize": true, "time": true, "wait": true, "evalsha_ro": true,
	"eval_ro": true, "multi": true, "exec": true, "discard": true, "watch": true, "unwatch": true,
	"cluster": true, "command": true, "readonly": true, "role": true,
}

func writes(cmd redis.Cmder) bool { return !readOnly[strings.ToLower(cmd.Name())] }

// durability is a go-redis hook that follows every write with WAIT on the
// same connection, so a write counts as done only when minReplicas replicas
// have it: a failover to one of them then keeps it. A single write becomes
// a pipeline [write, WAIT]; a pipeline with a write gets WAIT appended. It
// sits on the client, so asynq (enqueue, dequeue, ack) and dedup (claim,
// complete, release) are covered alike.
type durability struct {
	rdb         *redis.Client
	minReplicas int
	timeout     time.Duration
}

// RequireReplicas installs the hook on rdb (a single server or a Sentinel
// master client; a Cluster would need WAIT per shard and is refused).
func RequireReplicas(rdb redis.UniversalClient, n int, timeout time.Duration) error {
	c, ok := rdb.(*redis.Client)
	if !ok {
		return fmt.Errorf("ONCEQ_REDIS_MIN_REPLICAS works with a single server or Sentinel, not %T", rdb)
	}
	c.AddHook(durability{rdb: c, minReplicas: n, timeout: timeout})
	return nil
}

func (durability) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h durability) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !writes(cmd) {
			return next(ctx, cmd)
		}
		// One connection for the write and its WAIT: the pipeline hook
		// below appends the WAIT.
		_, err := h.rdb.Pipelined(ctx, func(p redis.Pipeliner) error { return p.Process(ctx, cmd) })
		if err != nil && cmd.Err() == nil {
			cmd.SetErr(err)
		}
		return cmd.Err()
	}
}

func (h durability) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		any := false
		for _, c := range cmds {
			any = any || writes(c)
		}
		if !any {
			return next(ctx, cmds)
		}
		wait := redis.NewIntCmd(ctx, "wait", h.minReplicas, h.timeout.Milliseconds())
		err := next(ctx, append(cmds, wait))
		if werr := wait.Err(); werr != nil {
			return errors.Join(err, fmt.Errorf("redis: WAIT: %w", werr))
		}
		if got := wait.Val(); got < int64(h.minReplicas) {
			nr := fmt.Errorf("%w: %d of %d within %s", ErrNotReplicated, got, h.minReplicas, h.timeout)
			for _, c := range cmds {
				if writes(c) && c.Err() == nil {
					c.SetErr(nr)
				}
			}
			return errors.Join(err, nr)
		}
		return err
	}
}
