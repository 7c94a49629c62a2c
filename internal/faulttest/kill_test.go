package faulttest

import (
	"errors"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/tasks"
)

// A worker killed with SIGKILL in the middle of two handlers, one after the
// gateway charged (the response never reached it) and one before its email
// was accepted: its liveness key expires, the other worker's fast recoverer
// hands both tasks back to asynq within seconds, and each effect still
// happens exactly once.
func TestKillNineMidHandler(t *testing.T) {
	requireFaultTests(t)
	t.Parallel()
	r := newRig(t)
	pay := r.payment("kill-pay-1", 1999)
	mail := r.email("kill-mail-1", "held@example.com")
	payKey, msgID := pay.Key.String(), tasks.MessageID(mail.Key.String())
	stall := r.gw.Stall(payKey, &Stall{AfterCharge: true, HonourCancel: true})
	hold := r.smtp.Hold("held@example.com", &Hold{})

	vars := r.workerVars(map[string]string{"ONCEQ_CONCURRENCY": "4"})
	a := startWorker(t, "worker-a", vars)
	r.enqueue(pay, mail)
	waitClosed(t, 30*time.Second, "worker A's charge call", stall.Arrived())
	waitClosed(t, 30*time.Second, "worker A's RCPT", hold.Arrived())
	b := startWorker(t, "worker-b", vars)

	killed := time.Now()
	a.kill()
	hold.Release() // A's SMTP connection died with it; let the server drop it
	waitClosed(t, 10*time.Second, "the gateway noticing A is gone", stall.Finished())
	if o := stall.Outcome(); o != "charged" {
		t.Fatalf("worker A's charge call: %s, want charged (the effect before the crash)", o)
	}

	// The liveness key lives 3 s; worker B's recoverer looks every second.
	// (asynq's own recoverer alone took 106-111 s.)
	eventually(t, 4*time.Minute, "both jobs recovered and done", r.settled(pay.Key, mail.Key))
	took := time.Since(killed)
	t.Logf("kill -9: both jobs done on worker B %s after the kill", took.Round(100*time.Millisecond))
	if took > 10*time.Second {
		t.Errorf("recovery took %s, want within 10 s of the kill", took.Round(100*time.Millisecond))
	}

	if n := r.gw.Charges(payKey); n != 1 {
		t.Errorf("%s charged %d times, want 1", payKey, n)
	}
	if n := r.gw.Posts(payKey); n != 2 {
		t.Errorf("%s: %d gateway calls, want 2 (A's, then B's replayed)", payKey, n)
	}
	if n := r.smtp.Count(msgID); n != 1 {
		t.Errorf("Message-ID %s delivered %d times, want 1", msgID, n)
	}
	if n := r.gw.Total(); n != 1 {
		t.Errorf("the gateway made %d charges, want 1", n)
	}
	for _, j := range []dedup.Job{pay, mail} {
		rec := r.status(j.Key)
		if rec.Attempts != 2 || !b.owns(rec) {
			t.Errorf("%s: attempts %d by %q, want 2 by worker B %q", j.Key, rec.Attempts, rec.Owner, b.owner())
		}
		// Acknowledged by B: deleted, as a type that keeps no completed
		// task for the dashboard (the default) has it.
		if info, err := r.insp.GetTaskInfo(j.Queue, j.Key.TaskID()); !errors.Is(err, asynq.ErrTaskNotFound) {
			t.Errorf("task %s: %+v %v, want acknowledged and deleted", j.Key, info, err)
		}
	}
	if q, err := r.load(); err != nil || q.active != 0 {
		t.Errorf("queues after recovery: %v %v, want nothing active", q, err)
	}
}
