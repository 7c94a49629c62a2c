package faulttest

import (
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/tasks"
)

// SIGTERM while three handlers run longer than ShutdownTimeout: a charge
// whose gateway stops when the client hangs up, one whose gateway charges
// anyway, and an email held before the server accepts it. The worker exits
// within ShutdownTimeout plus a few seconds, leaves its claims released (no
// lease to wait out), and a second worker runs each cut-off job once.
func TestSIGTERMDrain(t *testing.T) {
	requireFaultTests(t)
	t.Parallel()
	const shutdownTimeout = 2 * time.Second
	r := newRig(t)
	honour := r.payment("term-pay-honour", 501)
	ignore := r.payment("term-pay-ignore", 502)
	mail := r.email("term-mail-1", "slow@example.com")
	jobs := []dedup.Job{honour, ignore, mail}
	sHonour := r.gw.Stall(honour.Key.String(), &Stall{HonourCancel: true, For: 20 * time.Second})
	sIgnore := r.gw.Stall(ignore.Key.String(), &Stall{For: 6 * time.Second})
	hold := r.smtp.Hold("slow@example.com", &Hold{For: 8 * time.Second})

	vars := r.workerVars(map[string]string{
		"ONCEQ_SHUTDOWN_TIMEOUT": shutdownTimeout.String(),
		"ONCEQ_LEASE":            "60s",
		"ONCEQ_CONCURRENCY":      "4",
	})
	a := startWorker(t, "worker-a", vars)
	r.enqueue(jobs...)
	waitClosed(t, 30*time.Second, "charge call that honours cancellation", sHonour.Arrived())
	waitClosed(t, 30*time.Second, "charge call that ignores cancellation", sIgnore.Arrived())
	waitClosed(t, 30*time.Second, "held RCPT", hold.Arrived())

	took := a.term(shutdownTimeout + 10*time.Second)
	exited := time.Now()
	t.Logf("SIGTERM: worker A exited %s after the signal (shutdown timeout %s)", took.Round(time.Millisecond), shutdownTimeout)
	if took > shutdownTimeout+5*time.Second {
		t.Errorf("worker A took %s to exit, want at most shutdown timeout + 5s", took)
	}
	if code := a.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("worker A exit code %d, want 0", code)
	}
	// Cut off, pushed back, and released: nothing waits for a lease.
	for _, j := range jobs {
		if rec := r.status(j.Key); rec.State != dedup.StatusFailed {
			t.Errorf("%s after shutdown: %s (lease until %s), want released (failed)", j.Key, rec.State, rec.LeaseUntil)
		}
		if info, err := r.insp.GetTaskInfo(j.Queue, j.Key.TaskID()); err != nil || info.State != asynq.TaskStatePending {
			t.Errorf("task %s after shutdown: %+v %v, want pending", j.Key, info, err)
		}
	}

	b := startWorker(t, "worker-b", vars)
	eventually(t, time.Minute, "cut-off jobs done on worker B", r.settled(honour.Key, ignore.Key, mail.Key))
	done := time.Since(exited)
	t.Logf("SIGTERM: worker B finished the cut-off jobs %s after worker A exited", done.Round(time.Millisecond))
	if done > 20*time.Second {
		t.Errorf("worker B took %s: it waited for a lease the shutdown should have released", done)
	}
	waitClosed(t, 30*time.Second, "the orphaned charge call", sIgnore.Finished())
	waitClosed(t, 30*time.Second, "the abandoned charge call", sHonour.Finished())
	if o := sHonour.Outcome(); o != "aborted" {
		t.Errorf("charge call that honours cancellation: %s, want aborted", o)
	}
	t.Logf("SIGTERM: orphaned charge call that ignores cancellation: %s", sIgnore.Outcome())

	for _, j := range []dedup.Job{honour, ignore} {
		k := j.Key.String()
		if n := r.gw.Charges(k); n != 1 {
			t.Errorf("%s charged %d times, want 1", k, n)
		}
		if n := r.gw.Posts(k); n != 2 {
			t.Errorf("%s: %d gateway calls, want 2", k, n)
		}
	}
	if n := r.gw.Total(); n != 2 {
		t.Errorf("the gateway made %d charges, want 2", n)
	}
	if n := r.smtp.Count(tasks.MessageID(mail.Key.String())); n != 1 {
		t.Errorf("email delivered %d times, want 1", n)
	}
	for _, j := range jobs {
		if rec := r.status(j.Key); rec.Attempts != 2 || !b.owns(rec) {
			t.Errorf("%s: attempts %d by %q, want 2 by worker B", j.Key, rec.Attempts, rec.Owner)
		}
	}
}
