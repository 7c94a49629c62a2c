package faulttest

import (
	"bytes"
	"testing"
	"time"

	"github.com/onceq/onceq/dedup"
)

// A worker's network to Redis is cut in the middle of a charge; a second
// delivery of the job lets the other worker take the key over once the short
// lease lapses. When the network comes back, the stale worker's writes are
// refused by the fencing token, and the gateway's Idempotency-Key keeps the
// charge single, whether or not the stale handler honours cancellation.
func TestNetworkCutMidHandler(t *testing.T) {
	requireFaultTests(t)
	t.Parallel()
	t.Run("handler honours cancellation", func(t *testing.T) {
		t.Parallel()
		networkCut(t, true)
	})
	t.Run("handler ignores cancellation", func(t *testing.T) {
		t.Parallel()
		networkCut(t, false)
	})
}

func networkCut(t *testing.T, honour bool) {
	r := newRig(t)
	px, err := NewProxy(r.redis.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })

	job := r.payment("cut-pay-1", 700)
	key := job.Key.String()
	// Honouring: held before the charge, dropped when A's request is
	// cancelled. Ignoring: charged at once, the answer held until released,
	// so A's handler finishes after it lost the key.
	st := r.gw.Stall(key, &Stall{HonourCancel: honour, AfterCharge: !honour})

	vars := r.workerVars(map[string]string{"ONCEQ_LEASE": "3s", "ONCEQ_CONCURRENCY": "2"})
	viaProxy := r.workerVars(map[string]string{"ONCEQ_LEASE": "3s", "ONCEQ_CONCURRENCY": "2",
		"ONCEQ_REDIS_URL": "redis://" + px.Addr})
	a := startWorker(t, "worker-a", viaProxy)
	r.enqueue(job)
	waitClosed(t, 30*time.Second, "worker A's charge call", st.Arrived())
	b := startWorker(t, "worker-b", vars)

	px.Cut()
	cut := time.Now()
	second := r.redeliver(job)
	eventually(t, time.Minute, "worker B takes the key over and completes it", func() (bool, string) {
		rec := r.status(job.Key)
		return rec.State == dedup.StatusDone, string(rec.State) + " by " + rec.Owner
	})
	t.Logf("network cut: worker B completed the job %s after the cut", time.Since(cut).Round(time.Millisecond))
	won := r.status(job.Key)
	if !b.owns(won) || won.Attempts != 2 {
		t.Fatalf("record after takeover: attempts %d by %q, want 2 by worker B %q", won.Attempts, won.Owner, b.owner())
	}

	px.Restore()
	if !honour {
		st.Release() // A's handler now succeeds, too late: its Complete must be refused
	}
	waitClosed(t, 30*time.Second, "worker A's charge call to end", st.Finished())
	want := "aborted"
	if !honour {
		want = "charged" // by A, before the cut; B's call was replayed
	}
	if o := st.Outcome(); o != want {
		t.Errorf("worker A's charge call: %s, want %s", o, want)
	}
	eventually(t, 30*time.Second, "worker A's stale write refused (lease lost)", func() (bool, string) {
		n := metricSum(a.metrics(), "onceq_lease_lost_total", map[string]string{"key_namespace": job.Task.Type()})
		return n >= 1, "onceq_lease_lost_total is 0"
	})

	// Both deliveries end: A's acknowledged or retried into a duplicate.
	eventually(t, 4*time.Minute, "both deliveries finished", r.settled(job.Key))
	if rec := r.status(job.Key); rec.Token != won.Token || !bytes.Equal(rec.Result, won.Result) {
		t.Errorf("record changed after B's completion: token %d -> %d, result %s -> %s", won.Token, rec.Token, won.Result, rec.Result)
	}
	if info, err := r.insp.GetTaskInfo(job.Queue, second.ID); err != nil || info.State.String() != "completed" {
		t.Errorf("second delivery: %+v %v, want completed", info, err)
	}
	if n := r.gw.Charges(key); n != 1 {
		t.Errorf("%s charged %d times, want 1", key, n)
	}
	if n := r.gw.Posts(key); n != 2 {
		t.Errorf("%s: %d gateway calls, want 2", key, n)
	}
	if n := r.gw.Total(); n != 1 {
		t.Errorf("the gateway made %d charges, want 1", n)
	}
}
