package oncetest

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/internal/storerule"
)

// While one delivery runs, every other finds it in progress and comes back
// when it ends, to be answered as a duplicate: nobody gives up, nobody
// runs it twice.
func TestRequireOnceWaitsOutTheRunningDelivery(t *testing.T) {
	t.Parallel()
	const deliveries = 6
	var inProgress, duplicates atomic.Int64
	waiting := make(chan struct{})
	hook := func(_ context.Context, e dedup.Event) {
		switch e.Outcome {
		case storerule.OutcomeInProgress:
			if inProgress.Add(1) == deliveries-1 {
				close(waiting)
			}
		case storerule.OutcomeDuplicate:
			duplicates.Add(1)
		}
	}
	var runs atomic.Int64
	h := asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		runs.Add(1)
		<-waiting // all the others have been told it is running
		dedup.SetResult(ctx, []byte("ok"))
		return nil
	})
	rec, err := requireOnce(dedup.MiddlewareOptions{}, h, asynq.NewTask("scan:file", []byte(`{"id":"f-1"}`)), deliveries, hook)
	if err != nil {
		t.Fatal(err)
	}
	if runs.Load() != 1 || duplicates.Load() != deliveries-1 || string(rec.Result) != "ok" {
		t.Fatalf("%d runs, %d duplicates, record %+v", runs.Load(), duplicates.Load(), rec)
	}
}
