package api

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
)

// A principal whose enqueue of a job ended unknown takes the job's empty
// ownership with SET NX; when another request of it set the owner between
// the read and the SET NX, the answer is who owns it now, not an error.
func TestOwnsAfterALostSetNXRace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	k, _ := dedup.NewKey("payment:charge", "race-1")
	for _, owner := range []string{"alice", "bob"} {
		rdb := redistest.Client(t)
		rdb.AddHook(raceHook{rdb: rdb, key: ownerKey(k), owner: owner})
		s := &server{opts: Options{Redis: rdb, OwnerTTL: time.Minute}}
		s.unsure.add("alice", k)
		got, err := s.owns(ctx, k, "alice")
		if err != nil || got != (owner == "alice") {
			t.Errorf("owner %s set in the race: owns %v %v, want %v and no error", owner, got, err, owner == "alice")
		}
	}
}

// raceHook sets key to owner just before a SET NX of it: the SET NX loses.
type raceHook struct {
	rdb   *redis.Client
	key   string
	owner string
}

func (raceHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h raceHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if strings.EqualFold(cmd.Name(), "set") && len(args) > 1 && args[1] == h.key && strings.Contains(strings.ToLower(cmd.String()), " nx") {
			if err := next(ctx, redis.NewStatusCmd(ctx, "set", h.key, h.owner)); err != nil {
				return err
			}
		}
		return next(ctx, cmd)
	}
}

func (raceHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
