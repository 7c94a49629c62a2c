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
}

// Sweep starts the successor of each of ws whose key's run has ended, in
// one call (lua/sweep.lua); each answer is 1 started, 0 no successor left
// (its entry dropped), -1 still running.
func Sweep(ctx context.Context, rdb redis.UniversalClient, registry string, ws []Waiting, now time.Time) ([]int64, error) {
	keys := make([]string, 0, 1+6*len(ws))
	args := make([]any, 0, 1+2*len(ws))
	keys = append(keys, registry)
	args = append(args, now.UnixNano())
	for _, w := range ws {
		sk := stateKeys(w.Queue)
		keys = append(keys, TaskKey(w.Queue, w.ID), sk[0], sk[2], sk[3], w.Record, w.Next)
		args = append(args, w.Field, w.ID)
	}
	out, err := sweepScript.Run(ctx, rdb, keys, args...).Int64Slice()
	if err == nil && len(out) != len(ws) {
		err = fmt.Errorf("dedup: successor sweep answered %d of %d", len(out), len(ws))
	}
	return out, err
}
