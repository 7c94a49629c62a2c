package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
)

// producer history lists a key's decisions with their ways in, newest
// first, and status counts them.
func TestHistoryCommand(t *testing.T) {
	srv := redistest.Start(t)
	t.Setenv("ONCEQ_REDIS_URL", "redis://"+srv.Addr)
	if out, err := cli(t, "", "payment", "--payment-id", "pmt-h-1", "--account", "acct-h", "--amount", "4200", "--currency", "EUR"); err != nil {
		t.Fatalf("payment: %v %s", err, out)
	}
	line := `{"type":"payment:charge","payload":{"payment_id":"pmt-h-1","account":"acct-h","amount":4200,"currency":"EUR"}}`
	if out, err := cli(t, line+"\n", "batch"); err != nil || !strings.Contains(out, "1 blocked") {
		t.Fatalf("batch: %v %s", err, out)
	}
	k := dedup.Key{Namespace: "payment:charge", ID: "pmt-h-1"}
	out, err := cli(t, "", "history", k.String())
	if err != nil {
		t.Fatalf("history: %v %s", err, out)
	}
	var got []string
	for l := range strings.Lines(out) {
		var e dedup.HistoryEntry
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("history line %q: %v", l, err)
		}
		if e.TaskID != k.TaskID() || e.Incarnation != 1 || e.At.IsZero() {
			t.Errorf("entry %+v", e)
		}
		got = append(got, e.Source+" "+string(e.Decision)+" "+e.Reason)
	}
	if want := []string{"batch duplicate pending", "cli enqueued "}; strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("history %q, want %q", got, want)
	}
	if byID, err := cli(t, "", "history", k.TaskID()); err != nil || byID != out {
		t.Fatalf("history by task id: %v\n%s", err, byID)
	}

	out, err = cli(t, "", "status", k.String())
	var st struct {
		State   dedup.Status `json:"state"`
		History int          `json:"history"`
	}
	if err != nil || json.Unmarshal([]byte(out), &st) != nil || st.State != dedup.StatusPending || st.History != 2 {
		t.Fatalf("status %v %s: want it pending with a history of 2", err, out)
	}

	if out, err := cli(t, "", "history", "payment:charge/none"); err != nil || out != "" {
		t.Fatalf("history of an unknown key: %v %q, want nothing", err, out)
	}
	for _, args := range [][]string{{"history"}, {"history", "no-slash"}, {"history", "fax:send/1"}, {"history", "a/1", "b/2"}} {
		if _, err := cli(t, "", args...); exitCode(err) != exitUsage {
			t.Errorf("%q: exit %d (%v), want %d", args, exitCode(err), err, exitUsage)
		}
	}
}
