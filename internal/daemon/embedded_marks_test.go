package daemon

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/storage"
)

// Compact marks work on the embedded Redis (miniredis), whose Lua has no
// struct library: the mark's bytes are built by hand there. A done key
// whose record expired is still a duplicate, other content a conflict.
func TestCompactMarksOnEmbedded(t *testing.T) {
	mr, stop, err := startEmbedded("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	s, err := dedup.NewRedisStore(rdb, storage.Options{DoneTTL: time.Hour, ResultTTL: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	k, err := dedup.NewKey("email:send", "embedded")
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.Claim(ctx, k, "fp-a", time.Minute, "")
	if err != nil || c.Outcome != dedup.Acquired {
		t.Fatalf("claim: %+v, %v", c, err)
	}
	if err := s.Complete(ctx, c.Hold, []byte(`"sent"`), 0); err != nil {
		t.Fatal(err)
	}
	mr.FastForward(time.Second) // the record's result TTL is over; the mark's hour is not
	r, err := s.Status(ctx, k)
	if err != nil || r.State != dedup.StatusDone || !r.Compact {
		t.Fatalf("status: %+v, %v; want done, remembered by its mark alone", r, err)
	}
	again, err := s.Claim(ctx, k, "fp-a", time.Minute, "")
	if err != nil || again.Outcome != dedup.Duplicate || !again.Compact {
		t.Errorf("repeat: %+v, %v; want a compact duplicate", again, err)
	}
	other, err := s.Claim(ctx, k, "fp-b", time.Minute, "")
	if err != nil || other.Outcome != dedup.Conflict {
		t.Errorf("other content: %+v, %v; want a conflict", other, err)
	}
}
