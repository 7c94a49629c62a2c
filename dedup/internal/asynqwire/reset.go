package asynqwire

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup/internal/history"
	"github.com/onceq/onceq/dedup/internal/mark"
)

var resetScript = redis.NewScript(history.Lua + mark.Del + source("reset.lua"))

// ResetArgs are one key's reset (lua/reset.lua).
type ResetArgs struct {
	// The key's own keys, all in its slot: record, successor, the set of
	// the windows its job took, its incarnation mark.
	Record, Next, WindowSet, Mark, History string
	// Entry is the reset's entry in History (internal/history).
	Entry string
	// Queue and ID are its task's; Queue "" leaves the task out (none
	// known, or on Cluster, where it is another slot's).
	Queue, ID string
	// LetFinish lets a running job finish unrecorded instead of refusing.
	LetFinish bool
	// Holder is the key as its windows hold it.
	Holder string
	// Incarnation is the key's next one, left in Mark for MarkTTL.
	Incarnation int
	MarkTTL     time.Duration
	// Marks and MarkID are the key's compact mark (dedup/internal/mark),
	// which goes too; "" none (Cluster: another slot).
	Marks, MarkID string
}

// ResetResult is what a reset found.
type ResetResult struct {
	// Found: something of the key was there (and is gone unless Running).
	Found bool
	// Running: a running job refused the reset (LetFinish false) or was
	// let finish unrecorded.
	Running bool
	// State is the task's asynq state ("" none), Record the record as it
	// was ("" none).
	State, Record string
}

// Reset runs a's reset in one step.
func Reset(ctx context.Context, rdb redis.UniversalClient, a ResetArgs) (ResetResult, error) {
	keys := []string{a.Record, a.Next, a.WindowSet, a.Mark, a.History}
	if a.Queue != "" {
		p := queuePrefix(a.Queue)
		keys = append(keys, TaskKey(a.Queue, a.ID), p+"pending", p+"scheduled", p+"retry", p+"archived", p+"completed")
	}
	finish := "0"
	if a.LetFinish {
		finish = "1"
	}
	args := []any{finish, a.Holder, max(a.Incarnation, 1), max(a.MarkTTL.Milliseconds(), 1), a.Entry}
	if a.Marks != "" {
		keys = append(keys, a.Marks)
		args = append(args, a.MarkID, time.Now().UnixMilli())
	}
	v, err := resetScript.Run(ctx, rdb, keys, args...).Slice()
	if err != nil {
		return ResetResult{}, err
	}
	if len(v) != 3 {
		return ResetResult{}, fmt.Errorf("dedup: reset replied %v", v)
	}
	code, _ := v[0].(int64)
	var r ResetResult
	r.State, _ = v[1].(string)
	r.Record, _ = v[2].(string)
	r.Found = code != 0
	r.Running = code == -1 || code == 2
	return r, nil
}
