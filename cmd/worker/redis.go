package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/onceq/onceq/config"
)

// defaultRedisAddr is where the worker looks for, or else starts, Redis when
// none is configured; a var so tests need not take the machine's 6379.
var defaultRedisAddr = "127.0.0.1:6379"

// connect returns the Redis client, and a stop func for the embedded
// in-memory Redis when it had to start one.
func connect(ctx context.Context, cfg config.Worker, log *zap.Logger) (redis.UniversalClient, func(), error) {
	stop := func() {}
	var rdb redis.UniversalClient
	switch {
	case cfg.Redis.Configured():
		var err error
		if rdb, err = cfg.Redis.Client(); err != nil {
			return nil, nil, err
		}
	case cfg.Embedded == config.EmbeddedAuto && !answers(defaultRedisAddr):
		mr, err := startEmbedded(ctx)
		if err != nil {
			return nil, nil, fmt.Errorf("embedded redis on %s: %w", defaultRedisAddr, err)
		}
		log.Warn("no Redis configured and none on " + defaultRedisAddr +
			": started an IN-MEMORY Redis there. NOTHING IS DURABLE: queued tasks and dedup records die with this process. Set ONCEQ_REDIS_URL for real use.")
		stop = mr.Close
		rdb = redis.NewClient(&redis.Options{Addr: mr.Addr()})
	default:
		rdb = redis.NewClient(&redis.Options{Addr: defaultRedisAddr,
			DialTimeout: cfg.DialTimeout, ReadTimeout: cfg.ReadTimeout, WriteTimeout: cfg.WriteTimeout})
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		stop()
		return nil, nil, fmt.Errorf("redis unreachable: %w", err)
	}
	return rdb, func() { rdb.Close(); stop() }, nil
}

func answers(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 300*time.Millisecond)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// startEmbedded runs miniredis on the default address. miniredis keeps its
// own clock for TTLs, so a ticker moves it along with real time: without it
// nothing would ever expire.
func startEmbedded(ctx context.Context) (*miniredis.Miniredis, error) {
	mr := miniredis.NewMiniRedis()
	if err := mr.StartAddr(defaultRedisAddr); err != nil {
		return nil, err
	}
	go func() {
		const step = time.Second
		t := time.NewTicker(step)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				mr.FastForward(step)
			}
		}
	}()
	return mr, nil
}

// checkEviction enforces noeviction: an evicting Redis could drop a dedup
// record or a queued task and break the guarantee silently.
func checkEviction(ctx context.Context, rdb redis.UniversalClient, mode string, log *zap.Logger) error {
	v, err := rdb.ConfigGet(ctx, "maxmemory-policy").Result()
	if err != nil || v["maxmemory-policy"] == "" {
		// Managed Redis often forbids CONFIG: say so, do not refuse.
		log.Warn("could not read maxmemory-policy; make sure it is noeviction", zap.Error(err))
		return nil
	}
	if p := v["maxmemory-policy"]; p != "noeviction" {
		msg := "redis maxmemory-policy is " + p + ", not noeviction: Redis may evict dedup records and tasks under memory pressure"
		if mode == config.MaxmemoryRefuse {
			return errors.New(msg)
		}
		log.Warn(msg)
	}
	return nil
}
