package dedup_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
)

// sent records the commands a client sends, one entry per round trip.
type sent struct {
	mu    sync.Mutex
	trips [][]string
}

func (s *sent) DialHook(next redis.DialHook) redis.DialHook { return next }
func (s *sent) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		s.add(cmd)
		return next(ctx, cmd)
	}
}
func (s *sent) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		s.add(cmds...)
		return next(ctx, cmds)
	}
}

func (s *sent) add(cmds ...redis.Cmder) {
	var names []string
	for _, c := range cmds {
		names = append(names, c.Name())
	}
	s.mu.Lock()
	s.trips = append(s.trips, names)
	s.mu.Unlock()
}

// take returns the round trips since the last call.
func (s *sent) take() [][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.trips
	s.trips = nil
	return t
}

// Where done keys keep no compact mark, the common first claim is one
// plain SET (no script); a duplicate or a mismatch on a done record is
// answered by that same command; only a live or failed record costs a
// script call.
func TestFirstClaimIsOneSet(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Client(t)
	var log sent
	rdb.AddHook(&log)
	s, _ := newStore(t, rdb, fullRecords)
	k, warm := mustKey(t, "email:send", "fast-1"), mustKey(t, "email:send", "warm")
	// Load the scripts (the first EVALSHA of each is answered NOSCRIPT).
	w := mustClaim(t, s, warm, "", time.Minute, dedup.Acquired)
	mustClaim(t, s, warm, "", time.Minute, dedup.InProgress)
	if err := s.Complete(ctx, w.Hold, nil, 0); err != nil {
		t.Fatal(err)
	}
	log.take()

	c := mustClaim(t, s, k, "fp", time.Minute, dedup.Acquired)
	if got := log.take(); !slices.Equal(flat(got), []string{"set"}) {
		t.Fatalf("first claim sent %v, want one SET", got)
	}
	mustClaim(t, s, k, "fp", time.Minute, dedup.InProgress)
	if got := log.take(); !slices.Equal(flat(got), []string{"set", "evalsha"}) {
		t.Fatalf("claim of a running record sent %v, want SET then the script", got)
	}
	if err := s.Complete(ctx, c.Hold, []byte("ok"), 0); err != nil {
		t.Fatal(err)
	}
	log.take()
	mustClaim(t, s, k, "fp", time.Minute, dedup.Duplicate)
	mustClaim(t, s, k, "other", time.Minute, dedup.Conflict)
	if got := log.take(); !slices.Equal(flat(got), []string{"set", "set"}) {
		t.Fatalf("duplicate and mismatch sent %v, want one SET each", got)
	}
}

func flat(trips [][]string) []string {
	var out []string
	for _, t := range trips {
		out = append(out, t...)
	}
	return out
}
