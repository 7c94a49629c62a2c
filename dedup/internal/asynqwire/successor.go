package asynqwire

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Waiting is a key whose successor waits for its run to end.
type Waiting struct {
	Field, Queue, ID string // its field in the successors hash, its task's queue and id
	Record, Next     string // its record and successor keys
	History          string // its history key
}

// Sweep starts the successor of each of ws whose key's run has ended, in
// one call (lua/sweep.lua), its history gaining an entry that starts with
// head (history.Head); each answer is 1 started, 0 no successor left (its
// entry dropped), -1 still running.
func Sweep(ctx context.Context, rdb redis.UniversalClient, registry string, ws []Waiting, now time.Time, head string) ([]int64, error) {
	keys := make([]string, 0, 1+7*len(ws))
	args := make([]any, 0, 2+2*len(ws))
	keys = append(keys, registry)
	args = append(args, now.UnixNano(), head)
	for _, w := range ws {
		sk := stateKeys(w.Queue)
		keys = append(keys, TaskKey(w.Queue, w.ID), sk[0], sk[2], sk[3], w.Record, w.Next, w.History)
		args = append(args, w.Field, w.ID)
	}
	out, err := sweepScript.Run(ctx, rdb, keys, args...).Int64Slice()
	if err == nil && len(out) != len(ws) {
		err = fmt.Errorf("dedup: successor sweep answered %d of %d", len(out), len(ws))
	}
	return out, err
}
