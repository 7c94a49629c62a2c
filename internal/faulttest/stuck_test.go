package faulttest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/tasks"
)

// No key is stuck. Keys go through every state while one worker is killed
// with SIGKILL in the middle of three handlers, another is stopped with
// SIGSTOP in the middle of two, past its onceq claim (another worker takes
// the keys over) and past asynq's own lease, then woken with SIGCONT, and
// Redis (AOF) is killed and restarted; some payments are declined for good
// by the gateway and some plain asynq tasks are refused as invalid at the
// worker. Throughout, a repeat of an accepted key is refused only with a
// live or done job behind it. Once settled, every key is done, failed and
// free, or runnable; every failed key, enqueued again through the
// Producer, runs as incarnation 2 under a new downstream key (key#2); and
// each key and incarnation has at most one effect. The same on one Redis
// and on a Cluster, whose masters are all restarted at once.
func TestNoStuckKey(t *testing.T) {
	requireFaultTests(t)
	t.Parallel()
	for _, top := range topologies {
		t.Run(top.name, func(t *testing.T) {
			t.Parallel()
			noStuckKey(t, top.newRig(t, "--appendonly", "yes", "--appendfsync", "always"))
		})
	}
}

func noStuckKey(t *testing.T, r *rig) {
	const lease = 3 * time.Second // onceq's claim: a stopped worker is past it quickly
	r.gw.DeclineFirst("decline-")
	vars := func(concurrency int) map[string]string {
		return r.workerVars(map[string]string{"ONCEQ_LEASE": lease.String(), "ONCEQ_CONCURRENCY": itoa(concurrency)})
	}
	start := time.Now()

	var (
		jobs    []dedup.Job         // every key, as the Producer would enqueue it
		failing = map[string]bool{} // keys meant to fail for good
	)
	add := func(failsForGood bool, js ...dedup.Job) {
		for _, j := range js {
			jobs = append(jobs, j)
			failing[j.Key.String()] = failsForGood
		}
	}

	// Worker A fills its three slots with held handlers, worker Z its two.
	killPaid, killHeld := r.payment("kill-paid", 1001), r.payment("kill-held", 1002)
	killMail := r.email("kill-mail", "kill-held@example.com")
	paidStall := r.gw.Stall(killPaid.Key.String(), &Stall{AfterCharge: true, HonourCancel: true})
	heldStall := r.gw.Stall(killHeld.Key.String(), &Stall{HonourCancel: true})
	mailHold := r.smtp.Hold("kill-held@example.com", &Hold{})
	a := startWorker(t, "worker-a", vars(3))
	r.enqueue(killPaid, killHeld, killMail)
	add(false, killPaid, killHeld, killMail)
	waitClosed(t, 30*time.Second, "A's charge calls", paidStall.Arrived())
	waitClosed(t, 30*time.Second, "A's held charge", heldStall.Arrived())
	waitClosed(t, 30*time.Second, "A's RCPT", mailHold.Arrived())

	zPaid, zHeld := r.payment("zombie-paid", 2001), r.payment("zombie-held", 2002)
	zPaidStall := r.gw.Stall(zPaid.Key.String(), &Stall{AfterCharge: true})
	zHeldStall := r.gw.Stall(zHeld.Key.String(), &Stall{})
	z := startWorker(t, "worker-z", vars(2))
	t.Cleanup(func() { _ = z.cmd.Process.Signal(syscall.SIGCONT) }) // before its own cleanup's SIGTERM
	r.enqueue(zPaid, zHeld)
	add(false, zPaid, zHeld)
	waitClosed(t, 30*time.Second, "Z's charge call", zPaidStall.Arrived())
	waitClosed(t, 30*time.Second, "Z's held charge", zHeldStall.Arrived())

	b := startWorker(t, "worker-b", vars(6))
	batch := func(from, to int) []dedup.Job {
		var out []dedup.Job
		for i := from; i < to; i++ {
			out = append(out, r.payment(fmt.Sprintf("pay-%d", i), int64(3000+i)))
			if i%2 == 0 {
				out = append(out, r.email(fmt.Sprintf("mail-%d", i), fmt.Sprintf("mail-%d@example.com", i)))
			}
		}
		return out
	}
	declines := func(from, to int) []dedup.Job {
		var out []dedup.Job
		for i := from; i < to; i++ {
			out = append(out, r.payment(fmt.Sprintf("decline-%d", i), int64(4000+i)))
		}
		return out
	}
	first, firstDeclines := batch(0, 10), declines(0, 5)
	r.enqueue(first...)
	r.enqueue(firstDeclines...)
	add(false, first...)
	add(true, firstDeclines...)
	for i := range 4 {
		id := fmt.Sprintf("invalid-%d", i)
		j := r.payment(id, int64(5000+i)) // the corrected payment, enqueued later
		r.plainInvalid(j, id)
		add(true, j)
	}

	// Repeats of keys that are meant to succeed, all through the chaos.
	stopRepeats := make(chan struct{})
	var (
		repeatWG  sync.WaitGroup
		repeatMu  sync.Mutex
		repeats   = map[string]int{}
		badRepeat []string
	)
	repeatable := make([]dedup.Job, 0, len(jobs))
	for _, j := range jobs {
		if !failing[j.Key.String()] {
			repeatable = append(repeatable, j)
		}
	}
	repeatWG.Go(func() {
		for {
			select {
			case <-stopRepeats:
				return
			case <-time.After(50 * time.Millisecond):
			}
			j := repeatable[rand.N(len(repeatable))]
			o, err := r.prod.Enqueue(context.Background(), j)
			repeatMu.Lock()
			switch {
			case err != nil:
				repeats["error"]++
			case o.Decision == dedup.Duplicate:
				repeats["duplicate "+string(o.State)]++
				if o.State == dedup.StatusArchived || o.State == dedup.StatusFailed || o.State == dedup.StatusUnknown {
					badRepeat = append(badRepeat, fmt.Sprintf("%s: duplicate %s (%s)", j.Key, o.State, o.Reason))
				}
			default:
				repeats[string(o.Decision)]++
				if o.Decision != dedup.Throttled {
					badRepeat = append(badRepeat, fmt.Sprintf("%s: %s (%s)", j.Key, o.Decision, o.Reason))
				}
			}
			repeatMu.Unlock()
		}
	})
	endRepeats := sync.OnceFunc(func() { close(stopRepeats); repeatWG.Wait() })
	defer endRepeats()

	// The chaos: kill -9 A, stop Z, restart Redis.
	chaos := time.Now()
	a.kill()
	mailHold.Release() // A's SMTP connection died with it
	waitClosed(t, 10*time.Second, "the gateway noticing A is gone", heldStall.Finished())
	waitClosed(t, 10*time.Second, "A's charged call ending", paidStall.Finished())
	if o := heldStall.Outcome(); o != "aborted" {
		t.Fatalf("A's held charge: %s, want aborted (no charge before the crash)", o)
	}
	if err := z.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	zPaidStall.Release() // charged before the stop; the answer waits in Z's socket

	r.restartRedis()
	eventually(t, 30*time.Second, "B ready after the Redis restart", func() (bool, string) {
		code, body := b.get("/readyz")
		return code == http.StatusOK, body
	})
	second, secondDeclines := batch(10, 20), declines(5, 10)
	outageErrs := 0
	for _, j := range append(second, secondDeclines...) {
		_, n := r.enqueueThrough(j, 30*time.Second)
		outageErrs += n
	}
	add(false, second...)
	add(true, secondDeclines...)

	// Z is a zombie past its claim: B takes its keys over through a second
	// delivery, charging the held one and replaying the charged one.
	eventually(t, 30*time.Second, "Z's claims lapsed", r.claimOver(zPaid, zHeld))
	r.redeliver(zPaid)
	r.redeliver(zHeld)
	// Past asynq's lease too, Z wakes: its stale handlers end, fenced out.
	eventually(t, 90*time.Second, "Z's asynq leases ended", r.leaseOver(zPaid, zHeld))
	stopped := time.Since(chaos)
	if err := z.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	zHeldStall.Release()
	t.Logf("no stuck key: Z stopped for %s, past its %s claim and asynq's lease", stopped.Round(time.Second), lease)

	// A new worker's recoverer runs at its start: bring it up when A's and
	// Z's tasks are recoverable instead of waiting for B's next minute.
	eventually(t, 90*time.Second, "A's and Z's tasks recoverable", r.recoverable(killPaid, killHeld, killMail, zPaid, zHeld))
	c := startWorker(t, "worker-c", vars(4))
	live := []*worker{b, c, z}

	keyOf := func(j dedup.Job) string { return j.Key.String() }
	settled := func() (bool, string) {
		for _, j := range jobs {
			st, ok, detail := r.keyState(j, live)
			if !ok || st == keyRunnable {
				return false, detail
			}
		}
		q, err := r.load()
		if err != nil || !q.idle() {
			return false, fmt.Sprintf("%v %v", q, err)
		}
		running, err := r.running()
		if err != nil || len(running) > 0 {
			return false, fmt.Sprintf("running records %v (%v)", running, err)
		}
		return true, ""
	}
	settle := eventually(t, 3*time.Minute, "every key done or failed for good", settled)
	endRepeats()

	counts := map[string]int{}
	var failed []dedup.Job
	for _, j := range jobs {
		st, ok, detail := r.keyState(j, live)
		if !ok {
			t.Errorf("stuck key: %s", detail)
			continue
		}
		counts[st]++
		if st == keyFree {
			failed = append(failed, j)
			if !failing[keyOf(j)] {
				t.Errorf("%s failed for good, but nothing should have failed it: %s", j.Key, detail)
			}
		} else if failing[keyOf(j)] {
			t.Errorf("%s is %s, want failed for good: %s", j.Key, st, detail)
		}
	}
	t.Logf("no stuck key: %d keys settled %s after the chaos (%s after C started): %d done, %d failed and free, %d runnable",
		len(jobs), time.Since(chaos).Round(time.Second), settle.Round(time.Second), counts[keyDone], counts[keyFree], counts[keyRunnable])
	repeatMu.Lock()
	t.Logf("no stuck key: repeats during the chaos: %v; %d enqueues retried through the outage", repeats, outageErrs)
	for _, s := range badRepeat {
		t.Errorf("repeat refused without a live or done job behind it: %s", s)
	}
	repeatMu.Unlock()
	m := b.metrics()
	if archived := metricSum(m, "onceq_queue_size", map[string]string{"state": "archived"}); int(archived) != len(failed) {
		t.Errorf("%v archived tasks, want one per failed key (%d)", archived, len(failed))
	}
	if blocked := metricSum(m, "onceq_blocked_keys", nil); blocked != 0 {
		t.Errorf("onceq_blocked_keys %v with %d failed keys of types that free them, want 0", blocked, len(failed))
	}
	if t.Failed() {
		return
	}

	// Free, proven: every key again through the Producer. A failed one is
	// its next incarnation; a done one is a duplicate with its result.
	again := map[string]dedup.Outcome{}
	for _, j := range jobs {
		o, err := r.prod.Enqueue(context.Background(), j)
		if err != nil {
			t.Fatalf("enqueue %s again: %v", j.Key, err)
		}
		again[keyOf(j)] = o
		switch {
		case failing[keyOf(j)] && (o.Decision != dedup.Enqueued || o.Incarnation < 2):
			t.Errorf("failed key %s enqueued again: %+v, want enqueued as incarnation 2 or later", j.Key, o)
		case !failing[keyOf(j)] && (o.Decision != dedup.Duplicate || o.State != dedup.StatusDone):
			t.Errorf("done key %s enqueued again: %+v, want a duplicate of the done job", j.Key, o)
		}
	}
	if t.Failed() {
		return
	}
	eventually(t, time.Minute, "every new incarnation done", r.settled(keysOf(jobs)...))

	// One effect per key and incarnation, and the new incarnations under new
	// downstream keys.
	charged := 0
	for _, j := range jobs {
		k := keyOf(j)
		if j.Task.Type() == tasks.TypeEmail {
			if n := r.smtp.Count(tasks.MessageID(k)); n != 1 {
				t.Errorf("%s delivered %d times, want 1", k, n)
			}
			continue
		}
		if !failing[k] {
			if n := r.gw.Charges(k); n != 1 {
				t.Errorf("%s charged %d times, want 1", k, n)
			}
			charged++
			continue
		}
		if declined, posts := r.gw.Declines(k), r.gw.Posts(k); declined != posts || (declined == 0) == strings.HasPrefix(j.Key.ID, "decline-") {
			t.Errorf("%s: %d declines of %d calls under the failed incarnation's key", k, declined, posts)
		}
		next := fmt.Sprintf("%s#%d", k, again[k].Incarnation) // the downstream key of that incarnation
		if n := r.gw.Charges(k); n != 0 {
			t.Errorf("%s: %d charges under the failed incarnation's key, want 0", k, n)
		}
		if n := r.gw.Charges(next); n != 1 || r.gw.Posts(next) == 0 {
			t.Errorf("%s: %d charges under %s, want 1", k, n, next)
		}
		charged++
	}
	if n := r.gw.Total(); n != charged {
		t.Errorf("the gateway made %d charges for %d charged keys", n, charged)
	}
	lost := map[string]float64{}
	for _, w := range live {
		lost[w.name] = metricSum(w.metrics(), "onceq_lease_lost_total", nil)
	}
	names := make([]string, 0, len(failed))
	for _, j := range failed {
		names = append(names, fmt.Sprintf("%s#%d", keyOf(j), again[keyOf(j)].Incarnation))
	}
	sort.Strings(names)
	t.Logf("no stuck key: %d failed keys enqueued again, each incarnation 2 and done under its new key (%s ... %s); %d charges for %d payments, %d emails once each; claims lost to a takeover %v; %s in all",
		len(failed), names[0], names[len(names)-1], r.gw.Total(), charged, r.smtp.Total(), lost, time.Since(start).Round(time.Second))
}

func keysOf(jobs []dedup.Job) []dedup.Key {
	ks := make([]dedup.Key, len(jobs))
	for i, j := range jobs {
		ks[i] = j.Key
	}
	return ks
}
