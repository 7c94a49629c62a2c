package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/onceq/onceq/dedup/oncetest/redistest"
)

// deadRedis points the CLI at a port nothing listens on: a command that
// touches Redis fails with "cannot reach Redis".
func deadRedis(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	t.Setenv("ONCEQ_REDIS_URL", "redis://"+addr)
	t.Setenv("ONCEQ_REDIS_DIAL_TIMEOUT", "100ms")
}

// Flags and the command are parsed before Redis is touched: help exits 0,
// typos say so with the usage exit code.
func TestCLIParsesBeforeRedis(t *testing.T) {
	deadRedis(t)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"email", "--help"}, 0, "-body-file"},
		{[]string{"payment", "-h"}, 0, "-payment-id"},
		{[]string{"enqueue", "--help"}, 0, "sms:send"},
		{[]string{"batch", "--help"}, 0, "names its line"},
		{[]string{"--version"}, 0, "producer "},
		{[]string{"emial", "--to", "a@example.com"}, exitUsage, `unknown command "emial"`},
		{[]string{"email", "--tp", "a@example.com"}, exitUsage, "flag provided but not defined: -tp"},
		{[]string{"email", "--to", "a@example.com", "extra"}, exitUsage, "unexpected arguments"},
		{[]string{"status"}, exitUsage, "one KEY"},
		{[]string{"status", "no-slash"}, exitUsage, "namespace/id"},
		// A payload the catalog refuses is bad input: exit 2, before Redis.
		{[]string{"email", "--to", "not-an-address", "--subject", "s", "--body", "b"}, exitUsage, "invalid payload"},
		{[]string{"email", "--to", "a@example.com"}, exitUsage, "subject and body are both empty"},
		{[]string{"enqueue", "email:send", `{"to":"a@example.com","subject":"","body":""}`}, exitUsage, "subject and body are both empty"},
		{[]string{"enqueue", "webhook:process", `{"source":"acme","event_id":"e1","type":"user.created","data":{"email":7}}`},
			exitUsage, "email"},
		{[]string{"enqueue", "fax:send", "{}"}, exitUsage, "unknown task type"},
		// Errors name the flag, not the payload field it fills.
		{[]string{"payment", "--account", "a", "--amount", "1", "--currency", "EUR"}, exitUsage, "--payment-id is required"},
		{[]string{"email", "--subject", "s", "--body", "b"}, exitUsage, "--to is required"},
		{[]string{"scan", "--mode", "full"}, exitUsage, "--path is required"},
		// A mistyped type is no job that "is unknown": it is a usage error.
		{[]string{"status", "fax:send/x"}, exitUsage, "the types are email:send, order:fulfil"},
		// Refused member names come with the accepted ones.
		{[]string{"enqueue", "scan:file", `{"file":"a"}`}, exitUsage, "accepted: path, file_id, mode"},
		{[]string{}, exitUsage, "no command"},
	} {
		out, err := cli(t, "", c.args...)
		msg := out
		if err != nil {
			msg += err.Error()
		}
		if exitCode(err) != c.code || !strings.Contains(msg, c.want) || strings.Contains(msg, "cannot reach Redis") {
			t.Errorf("producer %q: exit %d, want %d with %q\n%s", c.args, exitCode(err), c.code, c.want, msg)
		}
	}
}

// Documented exit codes tell enqueued, duplicate, throttled and conflict
// apart; a refused conflict leaves no rate window behind.
func TestExitCodes(t *testing.T) {
	srv := redistest.Start(t)
	t.Setenv("ONCEQ_REDIS_URL", "redis://"+srv.Addr)
	pay := func(id, account, amount string) (string, int) {
		out, err := cli(t, "", "payment", "--payment-id", id, "--account", account, "--amount", amount, "--currency", "EUR")
		return out, exitCode(err)
	}
	for _, c := range []struct {
		id, account, amount string
		code                int
		prefix              string
	}{
		{"pmt-20260628-001", "acct-1", "4200", 0, "enqueued payment:charge/pmt-20260628-001"},
		{"pmt-20260628-001", "acct-1", "4200", exitDuplicate, "duplicate of payment:charge/pmt-20260628-001"},
		{"pmt-20260628-002", "acct-1", "4200", exitThrottled, "throttled payment:charge/pmt-20260628-002"},
		{"pmt-20260628-001", "acct-evil", "999999", exitConflict, "conflict payment:charge/pmt-20260628-001"},
		{"pmt-20260628-003", "acct-evil", "999999", 0, "enqueued payment:charge/pmt-20260628-003"},
	} {
		if out, code := pay(c.id, c.account, c.amount); code != c.code || !strings.HasPrefix(out, c.prefix) {
			t.Fatalf("payment %s %s %s: exit %d, want %d; %s", c.id, c.account, c.amount, code, c.code, out)
		}
	}
}

// An email body comes from a file or from stdin, and means the same job.
func TestEmailBodyFromFileOrStdin(t *testing.T) {
	srv := redistest.Start(t)
	t.Setenv("ONCEQ_REDIS_URL", "redis://"+srv.Addr)
	path := filepath.Join(t.TempDir(), "body.txt")
	if err := os.WriteFile(path, []byte("Hello\nfrom a file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := cli(t, "", "email", "--to", "a@example.com", "--subject", "s", "--body-file", path)
	if err != nil || !strings.HasPrefix(out, "enqueued email:send/~") {
		t.Fatalf("from file: %v %s", err, out)
	}
	out, err = cli(t, "Hello\nfrom a file\n", "email", "--to", "a@example.com", "--subject", "s", "--body-file", "-")
	if exitCode(err) != exitDuplicate {
		t.Fatalf("the same body from stdin: exit %d %s", exitCode(err), out)
	}
	if _, err := cli(t, "", "email", "--to", "a@example.com", "--body", "b", "--body-file", path); exitCode(err) != exitUsage {
		t.Fatalf("--body with --body-file: %v", err)
	}
}
