package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/dedup/storage"
)

// A done payment, reset, is enqueued again as the key's next incarnation
// (a new downstream key); a running one refuses the reset with exit 6.
func TestResetAndPurge(t *testing.T) {
	srv := redistest.Start(t)
	t.Setenv("ONCEQ_REDIS_URL", "redis://"+srv.Addr)
	rdb := srv.Client(t)
	ctx := context.Background()
	pay := []string{"payment", "--payment-id", "pmt-reset-1", "--account", "acct-r", "--amount", "4200", "--currency", "EUR"}
	if out, err := cli(t, "", pay...); err != nil || !strings.HasPrefix(out, "enqueued payment:charge/pmt-reset-1") {
		t.Fatalf("payment: %v %s", err, out)
	}
	store, _ := dedup.NewRedisStore(rdb, storage.Options{})
	k := dedup.Key{Namespace: "payment:charge", ID: "pmt-reset-1"}
	c, _ := store.Claim(ctx, k, "", time.Minute, "")
	if out, err := cli(t, "", "reset", k.String()); exitCode(err) != exitRunning || !strings.HasPrefix(out, "running payment:charge/pmt-reset-1") {
		t.Fatalf("reset of a running job: exit %d %v %s, want %d", exitCode(err), err, out, exitRunning)
	}
	if err := store.Complete(ctx, c.Hold, []byte(`{"charge_id":"ch_1"}`), 0); err != nil {
		t.Fatal(err)
	}
	insp := asynq.NewInspectorFromRedisClient(rdb)
	_ = insp.DeleteTask("critical", k.TaskID()) // as asynq does once the run is done
	if out, err := cli(t, "", pay...); exitCode(err) != exitDuplicate {
		t.Fatalf("repeat before the reset: exit %d %s", exitCode(err), out)
	}
	if out, err := cli(t, "", "reset", k.String()); err != nil || out != "reset payment:charge/pmt-reset-1 (was done)\n" {
		t.Fatalf("reset: %v %q", err, out)
	}
	if out, err := cli(t, "", "reset", k.String()); err != nil || !strings.HasPrefix(out, "unknown payment:charge/pmt-reset-1") {
		t.Fatalf("second reset: %v %q", err, out)
	}
	if out, err := cli(t, "", pay...); err != nil || !strings.HasPrefix(out, "enqueued payment:charge/pmt-reset-1") {
		t.Fatalf("payment after the reset: %v %s", err, out)
	}
	info, err := insp.GetTaskInfo("critical", k.TaskID())
	if err != nil || info.Headers["onceq-inc"] != "2" {
		t.Fatalf("task after the reset: %+v %v, want incarnation 2 (downstream key %s#2)", info, err, k)
	}
	if out, err := cli(t, "", "purge", "payment:charge"); err != nil || out != "purged payment:charge: 1 records and tasks deleted\n" {
		t.Fatalf("purge: %v %q", err, out)
	}
	if q, err := insp.GetQueueInfo("critical"); err != nil || q.Size != 0 {
		t.Fatalf("queue after the purge: %+v %v", q, err)
	}
	if _, err := cli(t, "", "purge", "fax:send"); exitCode(err) != exitUsage {
		t.Fatalf("purge of an unknown type: %v", err)
	}
}
