package onceq_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/hibiken/asynq"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/internal/linearize"
	"github.com/onceq/onceq/internal/redistest"
)

// The fast recoverer's take-over is linearizable with the claims, the dead
// holder's late completion and the next worker's claim: for each key a
// holder claims as the middleware does, then races its completion against
// the recoverer's release of its claim (recorded as a Release with the
// holder's token, which is what the step writes) and a new claimer; the
// model of the record accepts the history.
func TestFastRecovererLinearizable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Client(t)
	store, err := onceq.NewRedisStore(rdb, onceq.StoreOptions{})
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
	keys := map[string]onceq.Key{}
	for i := range n {
		k, _ := onceq.NewKey("lin:recover", fmt.Sprintf("k-%d", i))
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

	var hist linearize.History
	var wg sync.WaitGroup
	id := 0
	for taskID, k := range keys {
		holder := &linearize.Client{ID: id, Store: store, Owner: "h", Delivery: onceq.BootOwner + "/" + taskID, History: &hist}
		next := &linearize.Client{ID: id + 1, Store: store, Owner: fmt.Sprintf("next-%d", id), History: &hist}
		recoverer := id + 2
		id += 3
		c, err := holder.Claim(ctx, k, "fp", time.Minute)
		if err != nil || c.Outcome != onceq.Acquired {
			t.Fatalf("%s: holder's claim %+v %v", k, c, err)
		}
		wg.Go(func() { _ = holder.Complete(ctx, c.Hold, "late") })
		wg.Go(func() {
			op := hist.Begin(recoverer, linearize.Input{Kind: linearize.Release, Key: k.String(), Token: c.Hold.Token, Value: "gone"})
			how, err := onceq.RecoverTask(ctx, rdb, "default", taskID)
			switch {
			case err != nil:
				op.Lost()
			case how == "":
				op.End(linearize.Output{LeaseLost: true})
			default:
				op.End(linearize.Output{})
			}
		})
		wg.Go(func() {
			for range 50 {
				c, err := next.Claim(ctx, k, "fp", time.Minute)
				if err != nil || c.Outcome == onceq.Duplicate {
					return
				}
				if c.Outcome == onceq.Acquired {
					_ = next.Complete(ctx, c.Hold, "next")
					return
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
	wg.Wait()
	res := linearize.Check(linearize.Rules{Reentrant: true}, hist.Operations(), time.Minute)
	if res.Verdict != porcupine.Ok {
		t.Fatalf("not linearizable:\n%s", res.Report())
	}
	t.Logf("%d keys: the recoverer's release, the late completion and the next claim linearize", n)
}
