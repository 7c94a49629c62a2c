package dedup

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/encoding/protowire"
)

// The fast recoverer's coupling to asynq v0.26.0 (guardAsynqVersion) is
// this file and lua/recover.lua: the key layout of a queue, the fields of
// asynq's TaskMessage it edits, and its retry and archive steps. The
// contract test runs it against a real asynq server of that version.

var recoverScript = mustScript("recover.lua")

// asynq's keys of queue q (internal/base), as recover.lua needs them.
func asynqKeys(q, id string, now time.Time) []string {
	p := "asynq:{" + q + "}:"
	day := now.UTC().Format("2006-01-02")
	return []string{p + "t:" + id, p + "active", p + "lease", p + "pending", p + "archived",
		p + "processed:" + day, p + "failed:" + day, p + "processed", p + "failed"}
}

const (
	// asynqLeaseMargin is how long after a lease ran out asynq's recoverer
	// takes its task (its margin for clock skew).
	asynqLeaseMargin = 30 * time.Second
	statsTTL         = 90 * 24 * time.Hour // asynq keeps daily stats this long
	archiveMaxAge    = 90 * 24 * time.Hour // and archived tasks at most this long
	archiveMaxTasks  = 10000               // and at most this many
)

// failedAttempt returns msg with one more attempt counted, errMsg as its
// last error and now as its last failure, as asynq's Retry and Archive
// write it, and whether its retries are spent (asynq archives it then).
func failedAttempt(msg []byte, errMsg string, now time.Time) ([]byte, bool, error) {
	var retry, retried int64
	out := make([]byte, 0, len(msg)+len(errMsg)+16)
	err := msgFields(msg, func(num protowire.Number, typ protowire.Type, field, value []byte) {
		switch {
		case num == fieldRetry && typ == protowire.VarintType:
			v, _ := protowire.ConsumeVarint(value)
			retry = int64(int32(v))
		case num == fieldRetried && typ == protowire.VarintType:
			v, _ := protowire.ConsumeVarint(value)
			retried = int64(int32(v))
			return
		case num == fieldErrorMsg || num == fieldLastFailure:
			return
		}
		out = append(out, field...)
	})
	if err != nil {
		return nil, false, err
	}
	// retried is what asynq's recoverer compares with retry before it
	// counts the attempt (Retried >= Retry: archive).
	spent := retried >= retry
	if !spent {
		retried++
	}
	out = protowire.AppendTag(out, fieldRetried, protowire.VarintType)
	out = protowire.AppendVarint(out, uint64(retried))
	out = protowire.AppendTag(out, fieldErrorMsg, protowire.BytesType)
	out = protowire.AppendString(out, errMsg)
	out = protowire.AppendTag(out, fieldLastFailure, protowire.VarintType)
	out = protowire.AppendVarint(out, uint64(now.Unix()))
	return out, spent, nil
}

// errCrossSlot means the queue's keys and the record are in different
// Cluster slots: the fast recoverer cannot run there, asynq's does.
var errCrossSlot = errors.New("onceq: the fast recoverer needs the queue and the record in one Redis node")

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
	now := time.Now()
	keys := asynqKeys(o.queue, o.id, now)
	msg, err := rdb.HGet(ctx, keys[0], "msg").Bytes()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	cause := "onceq: asynq lease expired with no claim held"
	if o.holder != "" {
		cause = "onceq: worker " + o.owner + " is gone"
	}
	next, spent, err := failedAttempt(msg, cause, now)
	if err != nil {
		return "", fmt.Errorf("onceq: recover %s: task message: %w", o.id, err)
	}
	how := "retry"
	if spent {
		how = "archive"
	}
	live := o.live
	if live == "" {
		live = recordKey(o.key) // unused by the script; keeps KEYS in one slot where it can
	}
	n, err := recoverScript.Run(ctx, rdb, append(keys, recordKey(o.key), live),
		o.id, msg, next, how, o.holder, now.UnixMilli(), cause, failedTTL.Milliseconds(),
		now.Add(statsTTL).Unix(), now.Unix(), now.Add(-archiveMaxAge).Unix(), archiveMaxTasks,
		"asynq:{"+o.queue+"}:t:", int64(math.MaxInt64)).Int64()
	switch {
	case err != nil && strings.Contains(err.Error(), "CROSSSLOT"):
		return "", errCrossSlot
	case err != nil:
		return "", fmt.Errorf("onceq: recover %s: %w", o.id, err)
	case n == 1:
		return "retried", nil
	case n == 2:
		return "archived", nil
	}
	return "", nil
}

// findOrphans lists the active tasks of queue whose claim's owner has no
// liveness key, and those asynq's lease ran out on with no claim held or a
// claim whose lease ran out too: one round trip for the active list, one
// for their records and leases, one for their owners' liveness keys.
// writing is since when the caller has written its own liveness key: a
// lease counts as over only once the caller could write for asynq's
// whole margin after it ran out, as the lease's holder could extend it.
func findOrphans(ctx context.Context, rdb redis.UniversalClient, queue string, writing time.Time) ([]orphan, error) {
	p := "asynq:{" + queue + "}:"
	ids, err := rdb.LRange(ctx, p+"active", 0, -1).Result()
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	type cand struct {
		o     orphan
		rec   *redis.StringCmd
		ttl   *redis.DurationCmd
		lease *redis.FloatCmd
		live  *redis.IntCmd
		// over: asynq's lease ran out 30 s ago (asynq's own margin for skew)
		over  bool
		grace time.Duration
	}
	var cs []*cand
	_, err = rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
		for _, id := range ids {
			k, err := keyFromTaskID(id)
			if err != nil {
				continue // not an onceq task id: its key is not known here
			}
			cs = append(cs, &cand{o: orphan{queue: queue, id: id, key: k},
				rec: pl.Get(ctx, recordKey(k)), ttl: pl.PTTL(ctx, recordKey(k)), lease: pl.ZScore(ctx, p+"lease", id)})
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	now := time.Now()
	cutoff := float64(now.Add(-asynqLeaseMargin).Unix())
	var out, check []*cand
	for _, c := range cs {
		v, err := c.rec.Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			continue
		}
		l, lerr := c.lease.Result()
		c.over = lerr == nil && l < cutoff && now.Sub(writing) >= asynqLeaseMargin
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
		c.o.owner, c.o.live = boot, liveKey(boot)
		c.o.holder = holderPrefix(Hold{Key: c.o.key, Token: rec.token, Owner: rec.owner})
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
