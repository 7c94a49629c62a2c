package faulttest

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/onceq/onceq/dedup"
)

// kill -HUP of a busy worker drains like SIGTERM: the running charge
// finishes inside the shutdown timeout, is recorded once, and the worker
// exits 0. (Go's default for SIGHUP is to die at once: exit 129, the claim
// left to expire, the charge run again minutes later.)
func TestSIGHUPDrains(t *testing.T) {
	requireFaultTests(t)
	t.Parallel()
	r := newRig(t)
	pay := r.payment("hup-pay-1", 601)
	stall := r.gw.Stall(pay.Key.String(), &Stall{HonourCancel: true, For: 2 * time.Second})
	a := startWorker(t, "worker-hup", r.workerVars(map[string]string{"ONCEQ_SHUTDOWN_TIMEOUT": "30s"}))
	r.enqueue(pay)
	waitClosed(t, 30*time.Second, "the charge call", stall.Arrived())

	took := a.signal(syscall.SIGHUP, 40*time.Second)
	t.Logf("SIGHUP: worker exited %s after the signal", took.Round(time.Millisecond))
	if code := a.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit code %d after SIGHUP, want 0 (a drain)", code)
	}
	if !strings.Contains(a.logText(), "received hangup") {
		t.Errorf("log does not say the drain began on the hangup")
	}
	waitClosed(t, 30*time.Second, "the charge call to end", stall.Finished())
	if o := stall.Outcome(); o == "aborted" {
		t.Errorf("the charge call was cut off (%s), want it to finish during the drain", o)
	}
	if rec := r.status(pay.Key); rec.State != dedup.StatusDone || rec.Attempts != 1 {
		t.Errorf("after SIGHUP: %s, %d attempts; want done once", rec.State, rec.Attempts)
	}
	if n := r.gw.Charges(pay.Key.String()); n != 1 {
		t.Errorf("charged %d times, want 1", n)
	}
}

// A second SIGTERM ends the drain at once, with a non-zero exit.
func TestSecondSIGTERMForcesExit(t *testing.T) {
	requireFaultTests(t)
	t.Parallel()
	r := newRig(t)
	pay := r.payment("term2-pay-1", 602)
	stall := r.gw.Stall(pay.Key.String(), &Stall{}) // held until the end of the test
	t.Cleanup(stall.Release)
	a := startWorker(t, "worker-term2", r.workerVars(map[string]string{"ONCEQ_SHUTDOWN_TIMEOUT": "5m"}))
	r.enqueue(pay)
	waitClosed(t, 30*time.Second, "the charge call", stall.Arrived())

	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the drain to begin", func() (bool, string) {
		return strings.Contains(a.logText(), "shutting down"), "no shutting-down line yet"
	})
	if a.exited() {
		t.Fatalf("worker exited during a 5m drain with a handler running")
	}
	took := a.signal(syscall.SIGTERM, 10*time.Second)
	t.Logf("second SIGTERM: worker exited %s after it", took.Round(time.Millisecond))
	if code := a.cmd.ProcessState.ExitCode(); code != 2 {
		t.Errorf("exit code %d after a second SIGTERM, want 2", code)
	}
	if !strings.Contains(a.logText(), "exiting now without draining") {
		t.Errorf("log does not say why the drain was cut short")
	}
}
