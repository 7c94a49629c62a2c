package faulttest

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup"
)

// Issue 40: kill -9 of a worker with payments in flight on keys spread
// over a Cluster's masters, some charged and some not yet: a second worker
// brings every job back and done within 10 s of the kill, and each key is
// charged once. On one Redis too, as the reference.
func TestClusterKillNine(t *testing.T) {
	requireFaultTests(t)
	t.Parallel()
	for _, top := range topologies {
		t.Run(top.name, func(t *testing.T) {
			t.Parallel()
			killNineManyKeys(t, top.newRig(t))
		})
	}
}

func killNineManyKeys(t *testing.T, r *rig) {
	const n, stalled = 20, 6
	var jobs []dedup.Job
	var stalls []*Stall
	for i := range n {
		j := r.payment(fmt.Sprintf("ckill-%02d", i), int64(1000+i))
		jobs = append(jobs, j)
		if i < stalled {
			// Half charged before the crash (the response lost), half not.
			stalls = append(stalls, r.gw.Stall(j.Key.String(), &Stall{AfterCharge: i%2 == 0, HonourCancel: true}))
		}
	}
	vars := r.workerVars(map[string]string{"ONCEQ_CONCURRENCY": "8"})
	a := startWorker(t, "worker-a", vars)
	r.enqueue(jobs...)
	for i, s := range stalls {
		waitClosed(t, 30*time.Second, "worker A's charge call "+strconv.Itoa(i), s.Arrived())
	}
	b := startWorker(t, "worker-b", vars)

	killed := time.Now()
	a.kill()
	for i, s := range stalls {
		waitClosed(t, 10*time.Second, "the gateway noticing A is gone", s.Finished())
		want := "aborted"
		if i%2 == 0 {
			want = "charged"
		}
		if o := s.Outcome(); o != want {
			t.Fatalf("worker A's stalled call %d: %s, want %s", i, o, want)
		}
	}

	// Wait past the 10 s to say how long it did take.
	eventually(t, 5*time.Minute, "every job recovered and done", r.settled(keysOf(jobs)...))
	took := time.Since(killed)
	spread, _ := r.perMaster("onceq:*:rec")
	t.Logf("kill -9: %d jobs done (records per master %v), the %d held by worker A on worker B %s after the kill",
		n, spread, stalled, took.Round(100*time.Millisecond))
	if took > 10*time.Second {
		t.Errorf("recovery took %s, want within 10 s of the kill", took.Round(100*time.Millisecond))
	}
	for i, j := range jobs {
		k := j.Key.String()
		if c := r.gw.Charges(k); c != 1 {
			t.Errorf("%s charged %d times, want 1", k, c)
		}
		if i < stalled {
			if rec := r.status(j.Key); !b.owns(rec) {
				t.Errorf("%s: done by %q, want worker B %q", k, rec.Owner, b.owner())
			}
		}
	}
	if c := r.gw.Total(); c != n {
		t.Errorf("the gateway made %d charges for %d payments", c, n)
	}
}

// Issue 40: a done payment whose completed task is gone, deleted from the
// dashboard or never kept (ONCEQ_KEEP_COMPLETED=false): the same payment
// sent again through the producer binary is a duplicate, already processed
// (exit 3), from the record alone, and nothing is delivered again. On one
// Redis too, as the reference.
func TestClusterDeletedDoneResend(t *testing.T) {
	requireFaultTests(t)
	t.Parallel()
	for _, top := range topologies {
		t.Run(top.name, func(t *testing.T) {
			t.Parallel()
			for _, keep := range []bool{true, false} {
				name := "deleted"
				if !keep {
					name = "not-kept"
				}
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					deletedDoneResend(t, top.newRig(t), keep)
				})
			}
		})
	}
}

func deletedDoneResend(t *testing.T, r *rig, keep bool) {
	_, producerBin := binaries(t)
	kept := map[string]string{"ONCEQ_KEEP_COMPLETED": strconv.FormatBool(keep)}
	w := startWorker(t, "worker", r.workerVars(kept))
	pvars := r.redisVars()
	pvars["ONCEQ_ENV"] = "development"
	pvars["ONCEQ_KEEP_COMPLETED"] = kept["ONCEQ_KEEP_COMPLETED"]
	id := "pmt-gone-" + strconv.FormatBool(keep)
	j := r.payment(id, 2500) // the job the binary builds, for its key and queue
	key := j.Key.String()
	pay := func() (string, error) {
		return runProducer(producerBin, pvars, "", "payment", "--payment-id", id, "--account", "acct-"+id,
			"--amount", "2500", "--currency", "EUR")
	}

	out, err := pay()
	if err != nil || !strings.HasPrefix(out, "enqueued "+key) {
		t.Fatalf("first payment: %v\n%s", err, out)
	}
	// On Cluster the task is in its key's home queue (dedup.ClusterQueues).
	_, queue, _ := strings.Cut(strings.TrimSpace(out), " on queue ")
	eventually(t, time.Minute, "the charge done", r.settled(j.Key))
	info, err := r.insp.GetTaskInfo(queue, j.Key.TaskID())
	switch {
	case keep && (err != nil || info.State != asynq.TaskStateCompleted):
		t.Fatalf("task of %s: %+v %v, want kept as completed", key, info, err)
	case !keep && !errors.Is(err, asynq.ErrTaskNotFound):
		t.Fatalf("task of %s: %+v %v, want none kept", key, info, err)
	}
	if err == nil {
		if err := r.insp.DeleteTask(queue, j.Key.TaskID()); err != nil {
			t.Fatalf("delete the completed task of %s: %v", key, err)
		}
	}

	out, err = pay()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 3 || !strings.HasPrefix(out, "duplicate of "+key) ||
		!strings.Contains(out, "already processed: done") {
		t.Errorf("the same payment again, its completed task gone: %v\n%s\nwant \"duplicate of %s ... already processed: done\", exit 3", err, out, key)
	}
	// Had it been enqueued, the worker would now take it and skip it as a
	// duplicate: let that happen before counting.
	eventually(t, time.Minute, "queues idle", func() (bool, string) {
		q, err := r.load()
		return err == nil && q.idle(), fmt.Sprintf("%v %v", q, err)
	})
	if d := metricSum(w.metrics(), "onceq_dedup_decisions_total", map[string]string{"side": "worker", "outcome": "duplicate"}); d != 0 {
		t.Errorf("the worker was handed %s again and skipped it as a duplicate %v times, want never delivered again", key, d)
	}
	if p, c := r.gw.Posts(key), r.gw.Charges(key); p != 1 || c != 1 {
		t.Errorf("%s: %d gateway calls, %d charges; want 1 and 1", key, p, c)
	}
}

// perMaster counts the keys matching pattern on each master, in the order
// the rig started them.
func (r *rig) perMaster(pattern string) ([]int, error) {
	ctx := context.Background()
	if r.cluster == nil {
		ks, err := r.keys(ctx, pattern)
		return []int{len(ks)}, err
	}
	counts := make([]int, len(r.cluster))
	for i, s := range r.cluster {
		c := redis.NewClient(&redis.Options{Addr: s.Addr})
		n := 0
		iter := c.Scan(ctx, 0, pattern, 500).Iterator()
		for iter.Next(ctx) {
			n++
		}
		err := iter.Err()
		c.Close()
		if err != nil {
			return nil, err
		}
		counts[i] = n
	}
	return counts, nil
}
