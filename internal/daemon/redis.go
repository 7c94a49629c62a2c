package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// Where describes o for logs and errors: topology and addresses, never
// credentials.
func Where(o *redis.UniversalOptions) string {
	var b strings.Builder
	switch {
	case o.IsClusterMode:
		b.WriteString("cluster " + strings.Join(o.Addrs, ","))
	case o.MasterName != "":
		fmt.Fprintf(&b, "sentinel master %q via %s, db %d", o.MasterName, strings.Join(o.Addrs, ","), o.DB)
	default:
		fmt.Fprintf(&b, "%s db %d", strings.Join(o.Addrs, ","), o.DB)
	}
	if o.TLSConfig != nil {
		b.WriteString(", TLS")
	}
	if o.Password != "" {
		b.WriteString(", with password")
	}
	return b.String()
}

func answers(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 300*time.Millisecond)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// embeddedMarker is set in the embedded Redis, which dies with the worker
// that owns it (no TTL needed): another process on it (producer serve)
// says what it is instead of failing to read CONFIG, which miniredis lacks.
const embeddedMarker = "onceq:embedded"

// startEmbedded runs miniredis on addr. miniredis keeps its own clock for
// TTLs, so a ticker moves it along with real time: without it nothing would
// ever expire.
func startEmbedded(addr string) (*miniredis.Miniredis, func(), error) {
	mr := miniredis.NewMiniRedis()
	if err := mr.StartAddr(addr); err != nil {
		return nil, nil, err
	}
	if err := mr.Set(embeddedMarker, "1"); err != nil {
		mr.Close()
		return nil, nil, err
	}
	done := make(chan struct{})
	go func() {
		const step = time.Second
		t := time.NewTicker(step)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				mr.FastForward(step)
			}
		}
	}()
	return mr, func() { close(done); mr.Close() }, nil
}

// waitRedis pings until Redis answers or ctx ends, backing off from 250ms
// to 5s: a pod whose Redis is not up yet stays unready instead of
// crash-looping.
func waitRedis(ctx context.Context, rdb redis.UniversalClient, where string, log *zap.Logger) error {
	delay := 250 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := rdb.Ping(ctx).Err()
		if err == nil {
			if attempt > 1 {
				log.Info("redis reachable", zap.String("redis", where), zap.Int("attempts", attempt))
			}
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("redis unreachable (%s): %w", where, context.Cause(ctx))
		}
		log.Warn("redis not reachable; retrying, not ready meanwhile", zap.String("redis", where),
			zap.Error(err), zap.Duration("retry_in", delay))
		select {
		case <-ctx.Done():
			return fmt.Errorf("redis unreachable (%s): %w", where, err)
		case <-time.After(delay):
		}
		delay = min(2*delay, 5*time.Second)
	}
}

// checkRedis holds the process rules about the Redis onceq trusts with its
// records. Eviction could drop a record or a queued task silently, so a
// policy other than noeviction is refused (refuse) or warned about. A Redis
// that keeps nothing on disk forgets every key when it restarts, and every
// accepted job then runs again: warned about, and so is one with RDB
// snapshots alone, which forgets what changed since the last one. Managed
// Redis often forbids CONFIG: say so, do not refuse.
func checkRedis(ctx context.Context, rdb redis.UniversalClient, refuseEviction bool, log *zap.Logger) error {
	v, err := rdb.ConfigGet(ctx, "maxmemory-policy").Result()
	if err != nil || v["maxmemory-policy"] == "" {
		log.Warn("could not read maxmemory-policy; make sure it is noeviction", zap.Error(err))
	} else if p := v["maxmemory-policy"]; p != "noeviction" {
		msg := "redis maxmemory-policy is " + p + ", not noeviction: Redis may evict dedup records and tasks under memory pressure"
		if refuseEviction {
			return errors.New(msg)
		}
		log.Warn(msg)
	}
	aof, err1 := rdb.ConfigGet(ctx, "appendonly").Result()
	rdb_, err2 := rdb.ConfigGet(ctx, "save").Result()
	switch {
	case err1 != nil || err2 != nil:
		log.Warn("could not read Redis persistence settings; make sure AOF or RDB is on", zap.Error(errors.Join(err1, err2)))
	case aof["appendonly"] != "yes" && strings.TrimSpace(rdb_["save"]) == "":
		log.Warn("redis persists nothing (appendonly no, no save points): a restarted Redis forgets every dedup record and queued task, and accepted jobs run again; turn on AOF (appendonly yes)")
	case aof["appendonly"] != "yes":
		// Redis's default: a restart goes back to the last snapshot, minutes
		// old, and the jobs done since then run again.
		log.Warn("redis keeps RDB snapshots only (appendonly no): a restarted Redis forgets what changed since the last snapshot, and jobs completed since then run again; turn on AOF (appendonly yes)",
			zap.String("save", rdb_["save"]))
	}
	return nil
}
