package asynqwire

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// LeaseMargin is how long after an active task's lease ran out asynq's
// recoverer takes it (its margin for clock skew).
const LeaseMargin = 30 * time.Second

const (
	statsTTL        = 90 * 24 * time.Hour // asynq keeps daily stats this long
	archiveMaxAge   = 90 * 24 * time.Hour // and archived tasks at most this long
	archiveMaxTasks = 10000               // and at most this many
)

// ErrCrossSlot means the queue's keys and the record are in different
// Cluster slots: Recover cannot run there; asynq's recoverer does.
var ErrCrossSlot = errors.New("dedup: the fast recoverer needs the queue and the record in one Redis node")

// Active lists the ids of queue's active tasks.
func Active(ctx context.Context, rdb redis.UniversalClient, queue string) ([]string, error) {
	return rdb.LRange(ctx, ActiveKey(queue), 0, -1).Result()
}

// Orphan is an active task to hand back to asynq.
type Orphan struct {
	Queue, ID string
	// Record is the key of the task's idempotency record. Holder is the
	// prefix a record held by the dead delivery starts with ("r|<token>|
	// <owner>|"), Live the owner's liveness key; both "" when no claim is
	// held and asynq's lease ran out.
	Record, Holder, Live string
	// Cause is the error asynq records for the attempt.
	Cause string
	// FailedTTL is how long the released record stays.
	FailedTTL time.Duration
}

// Recover hands o back to asynq, as asynq's recoverer would: pending again
// with the attempt counted, or archived when its retries are spent, and its
// claim released, in one step (lua/recover.lua) that does nothing if the
// owner lives or anything moved on, and that Redis refuses whole while it
// refuses writes. It returns "retried", "archived" or "".
func Recover(ctx context.Context, rdb redis.UniversalClient, o Orphan) (string, error) {
	now := time.Now()
	keys := recoverKeys(o.Queue, o.ID, now)
	msg, err := rdb.HGet(ctx, keys[0], "msg").Bytes()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	next, spent, err := FailedAttempt(msg, o.Cause, now)
	if err != nil {
		return "", fmt.Errorf("dedup: recover %s: task message: %w", o.ID, err)
	}
	how := "retry"
	if spent {
		how = "archive"
	}
	live := o.Live
	if live == "" {
		live = o.Record // unused by the script; keeps KEYS in one slot where it can
	}
	n, err := recoverScript.Run(ctx, rdb, append(keys, o.Record, live),
		o.ID, msg, next, how, o.Holder, now.UnixMilli(), o.Cause, o.FailedTTL.Milliseconds(),
		now.Add(statsTTL).Unix(), now.Unix(), now.Add(-archiveMaxAge).Unix(), archiveMaxTasks,
		TaskKey(o.Queue, ""), int64(math.MaxInt64)).Int64()
	switch {
	case err != nil && strings.Contains(err.Error(), "CROSSSLOT"):
		return "", ErrCrossSlot
	case err != nil:
		return "", fmt.Errorf("dedup: recover %s: %w", o.ID, err)
	case n == 1:
		return "retried", nil
	case n == 2:
		return "archived", nil
	}
	return "", nil
}
