package dedup

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup/internal/asynqwire"
	"github.com/onceq/onceq/dedup/storage"
)

// errCrossSlot: on Redis Cluster a task and its record sit in different
// slots, so the fast recoverer cannot run; asynq's own recoverer does.
var errCrossSlot = asynqwire.ErrCrossSlot

// orphan is an active task the fast recoverer may hand back.
type orphan struct {
	queue, id string
	key       Key
	// holder and live: the claim the task's dead owner holds and that
	// owner's liveness key; "" when no claim is held and asynq's lease has
	// run out (a worker died between its dequeue and its claim).
	holder, live string
	owner        string
	// lapsed: the owner lives, but the claim's lease and asynq's ran out,
	// so no handler holds the task (a dequeue whose reply was lost).
	lapsed bool
}

// recoverOrphan hands o back to asynq: pending again with the attempt
// counted, or archived when its retries are spent, and its claim released,
// in one step that does nothing if the owner lives or anything moved on.
// It returns "retried", "archived" or "".
func recoverOrphan(ctx context.Context, rdb redis.UniversalClient, o orphan, failedTTL time.Duration) (string, error) {
	cause := "onceq: asynq lease expired with no claim held"
	if o.holder != "" {
		cause = "onceq: worker " + o.owner + " is gone"
	}
	return asynqwire.Recover(ctx, rdb, asynqwire.Orphan{Queue: o.queue, ID: o.id, Record: recordKey(o.key),
		Holder: o.holder, Live: o.live, Cause: cause, FailedTTL: failedTTL})
}

// findOrphans lists the active tasks of queue whose claim's owner has no
// liveness key, and those asynq's lease ran out on with no claim held or a
// claim whose lease ran out too: one round trip for the active list, one
// for their records and leases, one for their owners' liveness keys.
// writing is since when the caller has written its own liveness key: a
// lease counts as over only once the caller could write for asynq's
// whole margin after it ran out, as the lease's holder could extend it.
func findOrphans(ctx context.Context, rdb redis.UniversalClient, queue string, writing time.Time) ([]orphan, error) {
	ids, err := asynqwire.Active(ctx, rdb, queue)
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	_, cluster := rdb.(*redis.ClusterClient)
	type cand struct {
		o     orphan
		rec   *redis.StringCmd
		ttl   *redis.DurationCmd
		lease *redis.FloatCmd
		live  *redis.IntCmd
		// over: the task's lease ran out a LeaseMargin ago
		over  bool
		grace time.Duration
	}
	var cs []*cand
	_, err = rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
		for _, id := range ids {
			k, err := storage.KeyFromTaskID(id)
			if err != nil || !atHome(cluster, queue, k) {
				// Not an onceq task id, or (on Cluster) not in its key's
				// home queue: asynq's own recoverer hands it back.
				continue
			}
			cs = append(cs, &cand{o: orphan{queue: queue, id: id, key: k},
				rec: pl.Get(ctx, recordKey(k)), ttl: pl.PTTL(ctx, recordKey(k)), lease: pl.ZScore(ctx, asynqwire.LeaseKey(queue), id)})
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	now := time.Now()
	cutoff := float64(now.Add(-asynqwire.LeaseMargin).Unix())
	var out, check []*cand
	for _, c := range cs {
		v, err := c.rec.Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			continue
		}
		l, lerr := c.lease.Result()
		c.over = lerr == nil && l < cutoff && now.Sub(writing) >= asynqwire.LeaseMargin
		rec, perr := unpack(v)
		if errors.Is(err, redis.Nil) || (perr == nil && rec.state != 'r') {
			if c.over {
				out = append(out, c) // no claim held, asynq's lease over
			}
			continue
		}
		if perr != nil {
			continue
		}
		// Only a delivery's claim names its process: bootOwner + "/" + task id.
		boot, ok := strings.CutSuffix(rec.owner, "/"+strings.ReplaceAll(c.o.id, "|", "_"))
		if !ok {
			continue
		}
		c.o.owner, c.o.live = boot, liveKey(boot, homeOf(c.o.key))
		c.o.holder = holderPrefix(storage.Hold{Key: c.o.key, Token: rec.token, Owner: rec.owner})
		c.grace = rec.grace()
		check = append(check, c)
	}
	if len(check) > 0 {
		_, err = rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
			for _, c := range check {
				c.live = pl.Exists(ctx, c.o.live)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		for _, c := range check {
			if c.live.Val() == 0 {
				out = append(out, c)
			} else if c.over && c.ttl.Val() <= c.grace {
				c.o.lapsed = true
				out = append(out, c)
			}
		}
	}
	os := make([]orphan, len(out))
	for i, c := range out {
		os[i] = c.o
	}
	return os, nil
}
