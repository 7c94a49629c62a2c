package faulttest

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/internal/testenv"
)

// Redis that answers reads but refuses writes hits every worker at once:
// none can refresh its liveness key, and each may see the others' keys
// expire. Ten charges held in flight on two live workers, then Redis refuses
// writes for a while in each way it can (OOM at maxmemory, NOREPLICAS under
// min-replicas-to-write, READONLY as a replica): no live worker is taken for
// dead, so every key reaches the gateway once and every job ends done.
func TestWriteRefusalTakesNoLiveWorkerForDead(t *testing.T) {
	requireFaultTests(t)
	t.Parallel()
	for _, tc := range []struct {
		name string
		// refuse makes the rig's Redis refuse writes and returns what
		// ends the refusal.
		refuse func(t *testing.T, r *rig, replica *redistest.Server) (end func())
		window time.Duration
	}{
		{"oom", refuseOOM, 8 * time.Second},
		{"noreplicas", refuseNoReplicas, 15 * time.Second},
		{"readonly", refuseReadOnly, 8 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t)
			var replica *redistest.Server
			if tc.name == "noreplicas" {
				host, port, _ := net.SplitHostPort(r.redis.Addr)
				replica = redistest.Start(t, "--replicaof", host, port)
				waitReplicas(t, r, 1)
				configSet(t, r, "min-replicas-to-write", "1")
			}
			const n = 10
			var jobs []dedup.Job
			var stalls []*Stall
			for i := range n {
				j := r.payment(fmt.Sprintf("refuse-%s-%02d", tc.name, i), int64(700+i))
				jobs = append(jobs, j)
				stalls = append(stalls, r.gw.Stall(j.Key.String(), &Stall{}))
			}
			vars := r.workerVars(map[string]string{"ONCEQ_CONCURRENCY": "5"})
			a := startWorker(t, "worker-a", vars)
			b := startWorker(t, "worker-b", vars)
			r.enqueue(jobs...)
			for i, s := range stalls {
				waitClosed(t, 30*time.Second, "charge call "+strconv.Itoa(i), s.Arrived())
			}

			end := tc.refuse(t, r, replica)
			time.Sleep(tc.window)
			end()
			t.Logf("%s: Redis refused writes for %s", tc.name, tc.window)
			// The window in which a live worker used to be taken for dead:
			// writes back, the workers' keys not yet refreshed, then a
			// whole liveness TTL (3 s) and more.
			time.Sleep(10 * time.Second)
			for _, s := range stalls {
				s.Release()
			}
			eventually(t, 2*time.Minute, "every job done", r.settled(keysOf(jobs)...))

			var counts []string
			twice := 0
			for _, j := range jobs {
				k := j.Key.String()
				p, c := r.gw.Posts(k), r.gw.Charges(k)
				counts = append(counts, fmt.Sprintf("%s=%d/%d", strings.TrimPrefix(k, "payment:charge/"), p, c))
				if p != 1 || c != 1 {
					twice++
				}
			}
			t.Logf("%s: gateway calls/charges per key: %s", tc.name, strings.Join(counts, " "))
			if twice > 0 {
				t.Errorf("%s: %d of %d keys reached the gateway other than once: a live worker's job ran again", tc.name, twice, n)
			}
			for _, w := range []*worker{a, b} {
				text := w.metrics()
				if got := metricSum(text, "onceq_dedup_decisions_total", map[string]string{"outcome": "orphaned"}); got != 0 {
					t.Errorf("%s recovered %v jobs of a live worker", w.name, got)
				}
				if got := metricSum(text, "onceq_liveness_refresh_failures_total", nil); got == 0 {
					t.Errorf("%s counted no failed liveness write while Redis refused writes", w.name)
				}
				if !strings.Contains(w.logText(), "liveness key not written") {
					t.Errorf("%s logged no warning about its liveness key", w.name)
				}
			}
		})
	}
}

// refuseOOM puts maxmemory below what Redis holds (noeviction): every write
// that may grow memory is refused with OOM.
func refuseOOM(t *testing.T, r *rig, _ *redistest.Server) func() {
	configSet(t, r, "maxmemory", "1")
	return func() { configSet(t, r, "maxmemory", "0") }
}

// refuseNoReplicas stops the only replica under min-replicas-to-write 1:
// every write is refused with NOREPLICAS until it is back and in sync.
func refuseNoReplicas(t *testing.T, r *rig, replica *redistest.Server) func() {
	replica.Stop()
	return func() {
		if err := replica.Restart(); err != nil {
			t.Fatalf("restart the replica: %v", err)
		}
		waitReplicas(t, r, 1)
	}
}

// refuseReadOnly makes the server a replica of a port where nothing
// listens, as in a failover: it keeps its data and answers reads, and
// refuses every write with READONLY.
func refuseReadOnly(t *testing.T, r *rig, _ *redistest.Server) func() {
	if err := r.rdb.ReplicaOf(context.Background(), "127.0.0.1", strconv.Itoa(testenv.FreePort(t))).Err(); err != nil {
		t.Fatalf("REPLICAOF: %v", err)
	}
	return func() {
		if err := r.rdb.ReplicaOf(context.Background(), "NO", "ONE").Err(); err != nil {
			t.Fatalf("REPLICAOF NO ONE: %v", err)
		}
	}
}

func configSet(t *testing.T, r *rig, name, value string) {
	t.Helper()
	if err := r.rdb.ConfigSet(context.Background(), name, value).Err(); err != nil {
		t.Fatalf("CONFIG SET %s %s: %v", name, value, err)
	}
}

// waitReplicas waits until the rig's Redis has n replicas in sync.
func waitReplicas(t *testing.T, r *rig, n int) {
	t.Helper()
	eventually(t, 30*time.Second, "replicas in sync", func() (bool, string) {
		info, err := r.rdb.Info(context.Background(), "replication").Result()
		if err != nil {
			return false, err.Error()
		}
		want := "connected_slaves:" + strconv.Itoa(n)
		return strings.Contains(info, want) && strings.Contains(info, "state=online"), info
	})
}
