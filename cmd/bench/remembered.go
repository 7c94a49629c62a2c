package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/dedup/storage"
)

// RememberedResult is Redis memory per remembered key: used_memory before
// and after Keys keys are claimed and completed through onceq's store (its
// real scripts), on a redis-server of its own, emptied between variants.
type RememberedResult struct {
	Keys int `json:"keys"`
	// FullBytes: a done record with its result (memResult), the result
	// kept for the whole 24 h done TTL (ResultTTL = DoneTTL: no mark).
	FullBytes float64 `json:"full_record_bytes"`
	// CompactBytes: the compact mark alone, 24 h done TTL, once the
	// records have expired (result TTL over).
	CompactBytes float64 `json:"compact_mark_bytes"`
	// Compact30dBytes: the same with a 30-day done TTL.
	Compact30dBytes float64 `json:"compact_mark_30d_bytes"`
	// Listpack: every mark hash sampled is listpack-encoded.
	Listpack bool    `json:"mark_hashes_listpack"`
	Seconds  float64 `json:"seconds"`
}

// residence is how long, on average, a mark is held per unit of its done
// TTL: its hash lives to the end of its bucket, half a done TTL at most.
const residence = 1.25

// PerDailyKey is the memory a steady load of one key a day holds with a
// done TTL of days, at bytes per remembered key.
func PerDailyKey(bytes float64, days float64) float64 { return bytes * days * residence }

// remembered measures the full record and the compact mark over n keys.
func (b *bench) remembered(ctx context.Context, n int) (RememberedResult, error) {
	start := time.Now()
	dir, err := os.MkdirTemp("", "onceq-bench-mem-")
	if err != nil {
		return RememberedResult{}, err
	}
	defer os.RemoveAll(dir)
	srv, err := redistest.LaunchInRange(dir, b.cfg.Ports, "--appendonly", "no", "--save", "")
	if err != nil {
		return RememberedResult{}, err
	}
	defer srv.Stop()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 128})
	defer rdb.Close()
	res := RememberedResult{Keys: n}
	for _, v := range []struct {
		done, keep time.Duration
		dst        *float64
	}{
		{24 * time.Hour, 24 * time.Hour, &res.FullBytes},
		{24 * time.Hour, time.Millisecond, &res.CompactBytes},
		{720 * time.Hour, time.Millisecond, &res.Compact30dBytes},
	} {
		per, lp, err := rememberKeys(ctx, rdb, n, v.done, v.keep)
		if err != nil {
			return res, fmt.Errorf("done TTL %v, result TTL %v: %w", v.done, v.keep, err)
		}
		*v.dst = per
		if v.keep < v.done {
			res.Listpack = lp
			if !lp {
				return res, errors.New("a mark hash is not listpack-encoded")
			}
		}
	}
	res.Seconds = time.Since(start).Seconds()
	return res, nil
}

// writers is how many goroutines remember keys at once.
const writers = 64

// rememberKeys empties rdb's server, then claims and completes n keys with
// a done TTL of done, results kept for keep, waits for the records to
// expire where keep is short, and returns used_memory's growth per key and
// whether the mark hashes it sampled are listpacks.
func rememberKeys(ctx context.Context, rdb *redis.Client, n int, done, keep time.Duration) (float64, bool, error) {
	store, err := dedup.NewRedisStore(rdb, storage.Options{DoneTTL: done, ResultTTL: keep})
	if err != nil {
		return 0, false, err
	}
	const ns = "bench:remember"
	key := func(i int) dedup.Key { return dedup.Key{Namespace: ns, ID: "m-" + strconv.Itoa(i)} }
	fp := func(i int) string { return fmt.Sprintf("%043d", i) } // as long as a SHA-256 in base64url
	one := func(i int) error {
		c, err := store.Claim(ctx, key(i), fp(i), time.Minute, "")
		if err != nil {
			return err
		}
		if c.Outcome != dedup.Acquired {
			return fmt.Errorf("claim %d: %s", i, c.Outcome)
		}
		return store.Complete(ctx, c.Hold, []byte(memResult), 0)
	}
	// Load the scripts and open the pool's connections (each costs Redis
	// some kilobytes: opened during the measure, they would count as the
	// keys'), then start from an empty keyspace.
	if err := one(-1); err != nil {
		return 0, false, err
	}
	var warm sync.WaitGroup
	for range writers {
		warm.Go(func() { rdb.Ping(ctx) })
	}
	warm.Wait()
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		return 0, false, err
	}
	before, err := usedMemory(ctx, rdb)
	if err != nil {
		return 0, false, err
	}
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	next := make(chan int, 1024)
	for range writers {
		wg.Go(func() {
			for i := range next {
				if err := one(i); err != nil {
					select {
					case errs <- err:
					default:
					}
					return
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		return 0, false, err
	default:
	}
	if keep < done {
		// A SCAN visits every key and drops the expired records on the way.
		time.Sleep(2 * keep)
		var cursor uint64
		for {
			_, c, err := rdb.Scan(ctx, cursor, "", 10000).Result()
			if err != nil {
				return 0, false, err
			}
			if cursor = c; cursor == 0 {
				break
			}
		}
		if m, _ := rdb.Keys(ctx, "onceq:{*}:"+ns+"/*:rec").Result(); len(m) > 0 {
			return 0, false, fmt.Errorf("%d records left after their result TTL", len(m))
		}
		c, err := store.Claim(ctx, key(0), fp(0), time.Minute, "")
		if err != nil || c.Outcome != dedup.Duplicate {
			return 0, false, fmt.Errorf("a repeat of a compacted key: %+v %v, want a duplicate", c, err)
		}
	}
	after, err := usedMemory(ctx, rdb)
	if err != nil {
		return 0, false, err
	}
	listpack := true
	marks, _, err := rdb.Scan(ctx, 0, "onceq:{*}:mark:"+ns+"/*:*", 1000).Result()
	if err != nil {
		return 0, false, err
	}
	for _, m := range marks {
		if enc := rdb.ObjectEncoding(ctx, m).Val(); enc != "listpack" {
			listpack = false
		}
	}
	return float64(after-before) / float64(n), listpack, nil
}

// usedMemory is INFO memory's used_memory.
func usedMemory(ctx context.Context, rdb *redis.Client) (int64, error) {
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, errors.New("no used_memory in INFO memory")
}
