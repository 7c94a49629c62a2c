package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/dedup/storage"
)

// cli runs the producer as main does, with the given stdin.
func cli(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(context.Background(), args, strings.NewReader(stdin), &out, &errOut)
	return out.String() + errOut.String(), err
}

func TestBatchSeed(t *testing.T) {
	srv := redistest.Start(t)
	t.Setenv("ONCEQ_REDIS_URL", "redis://"+srv.Addr)
	lines := `{"type":"email:send","payload":{"id":"email-welcome-1","to":"a@example.com","subject":"Welcome","body":"."}}
{"type":"email:send","payload":{"id":"email-welcome-1","to":"a@example.com","subject":"Welcome","body":"."}}
# comments and blank lines are skipped

{"type":"email:send","payload":{"id":"email-report-1","to":"a@example.com","subject":"Report","body":"."}}
`
	out, err := cli(t, lines, "batch")
	if err != nil {
		t.Fatalf("batch: %v\n%s", err, out)
	}
	if !strings.Contains(out, "batch: 2 enqueued, 1 blocked, 0 failed") || !strings.Contains(out, "duplicate of email:send/email-welcome-1") {
		t.Fatalf("batch output:\n%s", out)
	}
	info, err := asynq.NewInspectorFromRedisClient(srv.Client(t)).GetQueueInfo("default")
	if err != nil || info.Pending != 2 {
		t.Fatalf("pending %+v %v, want 2", info, err)
	}
}

func TestBatchRejectsBadLineAndEnqueuesNothing(t *testing.T) {
	srv := redistest.Start(t)
	t.Setenv("ONCEQ_REDIS_URL", "redis://"+srv.Addr)
	for name, line := range map[string]string{
		"unknown type":   `{"type":"fax:send","payload":{}}`,
		"unknown field":  `{"type":"email:send","payload":{"to":"a@example.com","subject":"s","body":"b","cc":"x"}}`,
		"wrong type":     `{"type":"payment:charge","payload":{"payment_id":"p","account":"a","amount":"12","currency":"EUR"}}`,
		"malformed":      `{"type":"email:send","payload":{`,
		"traversal":      `{"type":"scan:file","payload":{"path":"../../etc/passwd"}}`,
		"no source":      `{"type":"webhook:process","payload":{"event_id":"e","type":"t"}}`,
		"trailing":       `{"type":"email:send","payload":{"to":"a@example.com","subject":"s","body":"b"}} {}`,
		"header newline": `{"type":"email:send","payload":{"to":"a@example.com","subject":"s\r\nBcc: x@y","body":"b"}}`,
		"empty email":    `{"type":"email:send","payload":{"to":"a@example.com","subject":"","body":""}}`,
		"email a number": `{"type":"webhook:process","payload":{"source":"acme","event_id":"e","type":"user.created","data":{"email":7}}}`,
	} {
		good := `{"type":"email:send","payload":{"to":"ok@example.com","subject":"s","body":"b"}}`
		out, err := cli(t, good+"\n"+line+"\n", "batch")
		if err == nil || !strings.Contains(err.Error(), "line 2") || exitCode(err) != exitUsage {
			t.Errorf("%s: exit %d, err %v, out %s", name, exitCode(err), err, out)
		}
	}
	if n, _ := srv.Client(t).Exists(context.Background(), "asynq:{default}:pending").Result(); n != 0 {
		t.Fatal("a bad batch enqueued something")
	}
}

func TestStatusAndSingleCommands(t *testing.T) {
	srv := redistest.Start(t)
	t.Setenv("ONCEQ_REDIS_URL", "redis://"+srv.Addr)
	out, err := cli(t, "", "payment", "--payment-id", "pmt-20260628-001", "--account", "acct-1", "--amount", "4200", "--currency", "EUR")
	if err != nil || !strings.HasPrefix(out, "enqueued payment:charge/pmt-20260628-001") {
		t.Fatalf("payment: %v %s", err, out)
	}
	out, _ = cli(t, "", "payment", "--payment-id", "pmt-20260628-002", "--account", "acct-1", "--amount", "4200", "--currency", "EUR")
	if !strings.HasPrefix(out, "throttled payment:charge/pmt-20260628-002") || !strings.Contains(out, "retry in") {
		t.Fatalf("second payment: %s", out)
	}

	// Simulate the worker finishing the first one, then ask.
	store, _ := dedup.NewRedisStore(srv.Client(t), storage.Options{})
	k := dedup.Key{Namespace: "payment:charge", ID: "pmt-20260628-001"}
	c, _ := store.Claim(context.Background(), k, "", time.Minute, "")
	if err := store.Complete(context.Background(), c.Hold, []byte(`{"charge_id":"ch_9","to":"<ops@example.com>"}`), 0); err != nil {
		t.Fatal(err)
	}
	out, err = cli(t, "", "status", k.String())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, `"<ops@example.com>"`) {
		t.Errorf("status escapes what a terminal shows as is:\n%s", out)
	}
	var s dedup.JobStatus
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("status output %s: %v", out, err)
	}
	if !s.Processed || s.State != dedup.StatusDone || s.TaskState == nil || *s.TaskState != "pending" ||
		s.Queue == nil || *s.Queue != "critical" || s.CompletedAt == nil {
		t.Fatalf("status: %+v", s)
	}
	// The task id the dashboard shows answers the same.
	if byID, err := cli(t, "", "status", k.TaskID()); err != nil || byID != out {
		t.Fatalf("status by task id %s: %v\n%s\nwant\n%s", k.TaskID(), err, byID, out)
	}
	out, _ = cli(t, "", "payment", "--payment-id", "pmt-20260628-001", "--account", "acct-1", "--amount", "4200", "--currency", "EUR")
	if !strings.Contains(out, "already processed: done") || !strings.Contains(out, "ch_9") {
		t.Fatalf("repeat after processing: %s", out)
	}
	if _, err := cli(t, "", "email", "--to", "not-an-address", "--subject", "s", "--body", "b"); err == nil {
		t.Fatal("bad address accepted")
	}
	if _, err := cli(t, "", "status", "no-slash"); err == nil {
		t.Fatal("malformed status key accepted")
	}
}

func TestRedisUnreachableIsClear(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	t.Setenv("ONCEQ_REDIS_URL", "redis://"+addr)
	t.Setenv("ONCEQ_REDIS_DIAL_TIMEOUT", "200ms")
	_, err = cli(t, "", "email", "--to", "a@example.com", "--subject", "s", "--body", "b")
	if err == nil || !strings.Contains(err.Error(), "cannot reach Redis") {
		t.Fatalf("error %v", err)
	}
}

func TestHelpListsVariables(t *testing.T) {
	out, err := cli(t, "", "--help")
	// serve's variables too: --help is where the usage sends you.
	if err != nil || !strings.Contains(out, "ONCEQ_REDIS_URL") || !strings.Contains(out, "ONCEQ_API_ADDR") || !strings.Contains(out, "batch") {
		t.Fatalf("help: %v\n%s", err, out)
	}
	if _, err := cli(t, ""); err == nil {
		t.Fatal("no command accepted")
	}
}
