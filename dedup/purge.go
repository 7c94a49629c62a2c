package dedup

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup/internal/asynqwire"
)

// purgeBatch is how many keys one SCAN step returns, at most, and so one
// pipeline or script of Purge handles: Redis is never held long.
const purgeBatch = 500

// Purge frees every key of task type typ and deletes its waiting tasks, in
// bounded batches (SCAN, one pipeline or script per batch; never KEYS): the
// records, compact marks, successors, histories, incarnation marks and window sets of the
// keys of namespace typ (the task type is the namespace), the windows those
// keys hold, and the type's asynq tasks in every state but running, in the
// catalog's queues for typ, else in every queue. A running task is left
// to finish unrecorded, as Reset's finishRunning lets it: its record goes,
// so its completion records nothing. Keys freed this way come back as new
// (incarnation 1): the type's downstream keys start over, which is what a
// purge is for. It returns how many records and tasks went. The Observer
// hears op "purge", outcome "reset", once, with the counts in its reason.
//
// Purge is not atomic: a job enqueued while it runs may lose its task or
// record. Stop the type's producers first. On Cluster it scans every
// master; there the windows of the type's keys that a call of their own
// took (a rule key in another home) are not tracked and expire on their own.
func (p *Producer) Purge(ctx context.Context, typ string) (int, error) {
	if strings.ContainsAny(typ, "{}/") || typ == "" {
		return 0, fmt.Errorf("onceq: purge %q: not a task type", typ)
	}
	n, active := 0, 0
	queues := []string(nil)
	if kind, ok := p.opts.Catalog.lookup(typ); ok {
		queues = kind.Queues
	} else {
		qs, err := p.insp.Queues()
		if err != nil {
			return 0, fmt.Errorf("onceq: purge %s: %w", typ, err)
		}
		queues = qs
	}
	for _, q := range queues {
		err := scanKeys(ctx, p.rdb, asynqwire.TaskPattern(q), func(keys []string) error {
			d, a, err := asynqwire.PurgeTasks(ctx, p.rdb, q, typ, keys)
			n, active = n+d, active+a
			return err
		})
		if err != nil {
			return n, fmt.Errorf("onceq: purge %s: queue %s: %w", typ, q, err)
		}
	}
	records := 0
	prefix := typ + "/"
	err := scanKeys(ctx, p.rdb, keyPrefix+"{*}:"+globEscape(prefix)+"*", func(keys []string) error {
		_, err := p.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
			for _, key := range keys {
				_, name, _ := strings.Cut(key, "}:")
				switch {
				case strings.HasSuffix(key, ":wins"):
					purgeScript.Eval(ctx, pl, []string{key}, "wins", strings.TrimSuffix(name, ":wins"))
				case strings.HasSuffix(key, ":win"):
					purgeScript.Eval(ctx, pl, []string{key}, "win", prefix)
				default:
					if strings.HasSuffix(key, ":rec") {
						records++
					}
					pl.Unlink(ctx, key)
				}
			}
			return nil
		})
		return err
	})
	n += records
	if err == nil {
		// The compact marks of the type's done keys, whole hashes at a time.
		err = scanKeys(ctx, p.rdb, markPattern(typ), func(keys []string) error {
			return p.rdb.Unlink(ctx, keys...).Err()
		})
	}
	if err != nil {
		return n, fmt.Errorf("onceq: purge %s: %w", typ, err)
	}
	p.opts.Observer(ctx, Event{Op: opPurge, Key: Key{Namespace: typ}, Outcome: outcomeReset,
		Reason: fmt.Sprintf("purged by an operator: %d records and tasks deleted; %d running tasks finish unrecorded", n, active)})
	return n, nil
}

// scanKeys calls f with each batch of the keys matching pattern, on every
// master of a Cluster (one call of f at a time).
func scanKeys(ctx context.Context, rdb redis.UniversalClient, pattern string, f func([]string) error) error {
	var mu sync.Mutex
	scan := func(ctx context.Context, c redis.Cmdable) error {
		var cursor uint64
		for {
			keys, next, err := c.Scan(ctx, cursor, pattern, purgeBatch).Result()
			if err != nil {
				return err
			}
			if len(keys) > 0 {
				mu.Lock()
				err := f(keys)
				mu.Unlock()
				if err != nil {
					return err
				}
			}
			if cursor = next; cursor == 0 {
				return nil
			}
		}
	}
	if c, ok := rdb.(*redis.ClusterClient); ok {
		return c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return scan(ctx, m) })
	}
	return scan(ctx, rdb)
}

// globEscape quotes the SCAN MATCH metacharacters in s.
func globEscape(s string) string {
	var b strings.Builder
	for _, c := range s {
		if strings.ContainsRune(`*?[]\`, c) {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}
