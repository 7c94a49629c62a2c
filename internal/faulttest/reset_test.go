package faulttest

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// Issue 42, through the binaries: a done payment's id is reset by an
// operator, and the same id sent again is charged again under a new
// downstream key (the gateway does not replay the first charge).
func TestResetChargesAgainUnderANewKey(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	_, producerBin := binaries(t)
	vars := r.workerVars(nil)
	startWorker(t, "worker-reset", vars)
	const id, key = "pmt-reset-1", "payment:charge/pmt-reset-1"
	pay := func() (string, error) {
		return runProducer(producerBin, vars, "", "payment", "--payment-id", id, "--account", "acct-r", "--amount", "1500", "--currency", "EUR")
	}
	settled := func(incarnation string) func() (bool, string) {
		return func() (bool, string) {
			out, err := runProducer(producerBin, vars, "", "status", key)
			return err == nil && strings.Contains(out, `"state": "done"`) && strings.Contains(out, `"incarnation": `+incarnation), out
		}
	}

	if out, err := pay(); err != nil || !strings.HasPrefix(out, "enqueued "+key) {
		t.Fatalf("first payment: %v\n%s", err, out)
	}
	eventually(t, time.Minute, "the first charge done", settled("1"))
	if out, err := pay(); err == nil || !strings.HasPrefix(out, "duplicate of "+key) {
		t.Fatalf("the same id again: %v\n%s, want a duplicate (exit 3)", err, out)
	}
	if out, err := runProducer(producerBin, vars, "", "reset", key); err != nil || !strings.HasPrefix(out, "reset "+key+" (was done)") {
		t.Fatalf("reset: %v\n%s", err, out)
	}
	if out, err := pay(); err != nil || !strings.HasPrefix(out, "enqueued "+key) || !strings.Contains(out, "incarnation 2: the key was reset") {
		t.Fatalf("the same id after the reset: %v\n%s, want it enqueued as incarnation 2", err, out)
	}
	eventually(t, time.Minute, "the second charge done", settled("2"))
	if n, m := r.gw.Charges(key), r.gw.Charges(key+"#2"); n != 1 || m != 1 {
		t.Errorf("charges under %s: %d, under %s#2: %d; want one each", key, n, key, m)
	}

	// The key's history tells the operator's story, oldest first: what the
	// CLI sent and decided, between the worker's runs.
	out, err := runProducer(producerBin, vars, "", "history", key)
	if err != nil {
		t.Fatal(err)
	}
	var cli, all []string
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		var e struct {
			Source, Decision, Reason string
			Incarnation              int
		}
		if err := json.Unmarshal([]byte(lines[i]), &e); err != nil {
			t.Fatalf("history line %q: %v", lines[i], err)
		}
		step := fmt.Sprintf("%s %s %d", e.Source, e.Decision, e.Incarnation)
		all = append(all, step+" "+e.Reason)
		if e.Source == "cli" {
			cli = append(cli, step)
		}
	}
	want := []string{"cli enqueued 1", "cli duplicate 1", "cli reset 1", "cli enqueued 2"}
	if !slices.Equal(cli, want) {
		t.Errorf("the CLI's steps in the history: %q, want %q\nwhole history, oldest first:\n%s", cli, want, strings.Join(all, "\n"))
	}
}
