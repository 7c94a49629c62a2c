package dedup_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/dedup/storage"
)

// The fast recoverer's take-over races a dead holder's late completion and
// the next worker's claim on 20 keys, and each key ends one way only: the
// late completion is recorded and the recoverer does nothing, or the
// recoverer releases the claim, the late completion is refused as a lost
// lease and the next worker's run is the one recorded. (The Store's own
// operations are checked for linearizability in internal/linearize.)
func TestFastRecovererTakeOverIsAtomic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Client(t)
	store, err := dedup.NewRedisStore(rdb, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// asynq makes the tasks active and holds them: the claims are ours.
	const n = 20
	started := make(chan string, n)
	hang := make(chan struct{})
	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{Concurrency: n, LogLevel: asynq.FatalLevel,
		TaskCheckInterval: 10 * time.Millisecond, ShutdownTimeout: time.Millisecond})
	if err := srv.Start(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		id, _ := asynq.GetTaskID(ctx)
		started <- id
		<-hang
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { close(hang); srv.Shutdown() })
	client := asynq.NewClientFromRedisClient(rdb)
	t.Cleanup(func() { client.Close() })
	keys := map[string]dedup.Key{}
	for i := range n {
		k, _ := dedup.NewKey("lin:recover", fmt.Sprintf("k-%d", i))
		keys[k.TaskID()] = k
		if _, err := client.EnqueueContext(ctx, asynq.NewTask("lin:recover", nil), asynq.TaskID(k.TaskID())); err != nil {
			t.Fatal(err)
		}
	}
	for range n {
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("asynq did not start every task")
		}
	}

	type race struct {
		key           dedup.Key
		late, next    error  // the holder's completion, the next worker's
		recovered     string // the recoverer's step: "retried" or ""
		recoverErr    error
		nextAcquired  bool
		nextDuplicate bool
	}
	var wg sync.WaitGroup
	races := make([]*race, 0, n)
	for taskID, k := range keys {
		r := &race{key: k}
		races = append(races, r)
		c, err := store.Claim(ctx, k, "fp", time.Minute, dedup.BootOwner+"/"+taskID)
		if err != nil || c.Outcome != dedup.Acquired {
			t.Fatalf("%s: holder's claim %+v %v", k, c, err)
		}
		wg.Go(func() { r.late = store.Complete(ctx, c.Hold, []byte("late"), 0) })
		wg.Go(func() { r.recovered, r.recoverErr = dedup.RecoverTask(ctx, rdb, "default", taskID) })
		wg.Go(func() {
			for range 200 {
				nc, err := store.Claim(ctx, k, "fp", time.Minute, "")
				if err != nil || nc.Outcome == dedup.Duplicate {
					r.nextDuplicate = err == nil
					return
				}
				if nc.Outcome == dedup.Acquired {
					r.nextAcquired = true
					r.next = store.Complete(ctx, nc.Hold, []byte("next"), 0)
					return
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
	wg.Wait()
	var released int
	for _, r := range races {
		rec, err := store.Status(ctx, r.key)
		if err != nil || r.recoverErr != nil {
			t.Fatalf("%s: status %v, recover %v", r.key, err, r.recoverErr)
		}
		switch {
		case r.recovered == "" && r.late == nil:
			// The completion came first: the recoverer found nothing held.
			if !r.nextDuplicate || string(rec.Result) != "late" {
				t.Errorf("%s: late completion recorded, yet next claim duplicate %v, result %q", r.key, r.nextDuplicate, rec.Result)
			}
		case r.recovered == "retried" && errors.Is(r.late, storage.ErrLeaseLost):
			released++
			if !r.nextAcquired || r.next != nil || string(rec.Result) != "next" {
				t.Errorf("%s: released, yet next acquired %v (%v), result %q", r.key, r.nextAcquired, r.next, rec.Result)
			}
		default:
			t.Errorf("%s: recoverer %q and late completion %v: both or neither took effect", r.key, r.recovered, r.late)
		}
	}
	t.Logf("%d keys: %d released by the recoverer, %d completed late by their holder", n, released, n-released)
}
