package dedup

import (
	"context"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup/oncetest/redistest"
)

type charge struct {
	ID string `json:"id"`
}

// unguarded is a Producer whose asynq client is on a client no guard hook
// watches, as under an asynq the library did not verify
// (AllowUnverifiedAsynq), and a kind of typ whose jobs share one rate rule.
func unguarded(t *testing.T, typ string) (*Producer, *Typed[charge], redis.UniversalClient) {
	t.Helper()
	rdb := redistest.Client(t)
	p, err := NewProducer(rdb, nil, ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.folded.Load() == nil {
		t.Fatal("a Producer on a RedisStore of its own client does not fold its rules")
	}
	p.client.Close()
	plain := redis.NewClient(rdb.Options())
	t.Cleanup(func() { plain.Close() })
	p.client = asynq.NewClientFromRedisClient(plain)
	rate, _ := NewKey("rate", typ)
	kind := Define(Spec[charge]{Type: typ, ID: func(c charge) string { return c.ID },
		Rules: func(charge) ([]*Rule, error) { return []*Rule{{Key: rate, Window: time.Minute}}, nil }})
	return p, kind, rdb
}

// When asynq sends a script the guard does not know (another asynq
// version), no insert takes its rules' windows: the Producer reserves them
// after the insert and stops folding, so the rules still hold.
func TestUnguardedInsertStillTakesTheWindows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, kind, _ := unguarded(t, "unguarded:charge")
	if out, err := p.Enqueue(ctx, kind.Job(charge{"a"})); err != nil || out.Decision != Enqueued {
		t.Fatalf("first: %+v %v", out, err)
	}
	if p.folded.Load() != nil {
		t.Error("the Producer still folds after an unguarded insert")
	}
	if out, err := p.Enqueue(ctx, kind.Job(charge{"b"})); err != nil || out.Decision != Throttled {
		t.Fatalf("second on the same rule: %+v %v; want throttled", out, err)
	}
}

// The same when the unguarded insert meets a task it would replace (one
// archived): the replace cannot run unguarded, so the insert returns no
// guard, and the job is answered as it is without rules (a duplicate of
// the archived task), not with a panic.
func TestUnguardedReplaceWithRules(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, kind, rdb := unguarded(t, "unguarded:replace")
	j := kind.Job(charge{"a"})
	if _, err := p.client.EnqueueContext(ctx, j.Task, asynq.TaskID(j.Key.TaskID())); err != nil {
		t.Fatal(err)
	}
	insp := asynq.NewInspectorFromRedisClient(rdb)
	t.Cleanup(func() { insp.Close() })
	if err := insp.ArchiveTask("default", j.Key.TaskID()); err != nil {
		t.Fatal(err)
	}
	if out, err := p.Enqueue(ctx, j); err != nil || out.Decision != Duplicate || out.State != StatusArchived {
		t.Fatalf("an archived task met unguarded: %+v %v; want a duplicate of the archived task", out, err)
	}
}
