package tasks

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/onceq/onceq"
)

func TestSMSKeyRule(t *testing.T) {
	t.Parallel()
	msg := SMS{To: "+4915112345678", Body: "Your code is 1234"}
	hashed, err := buildJob(SMSes, msg, "")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(hashed.Key.String(), "sms:send/~") {
		t.Errorf("without id or key: %v, want the content hash", hashed.Key)
	}
	keyed, err := buildJob(SMSes, msg, "otp-1")
	if err != nil || keyed.Key.String() != "sms:send/otp-1" {
		t.Errorf("with an Idempotency-Key: %v %v", keyed.Key, err)
	}
	msg.ID = "otp-2"
	if own, _ := buildJob(SMSes, msg, "otp-1"); own.Key.String() != "sms:send/otp-2" {
		t.Errorf("the payload's id must win over the header: %v", own.Key)
	}
	for _, bad := range []SMS{{To: "015112345678", Body: "x"}, {To: "+4915112345678"},
		{To: "+4915112345678", Body: strings.Repeat("x", MaxSMSBodyBytes+1)}} {
		if _, err := buildJob(SMSes, bad, ""); !errors.Is(err, onceq.ErrInvalid) {
			t.Errorf("%+v: %v, want onceq.ErrInvalid", bad, err)
		}
	}
}

// The outbox sender writes one file per key; a redelivery finds it and
// sends nothing twice.
func TestSMSHandlerWritesOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	c, err := NewCatalog(Windows{})
	if err != nil {
		t.Fatal(err)
	}
	j, err := c.Build(TypeSMS, []byte(`{"to":"+4915112345678","body":"hi"}`), "otp-9")
	if err != nil {
		t.Fatal(err)
	}
	h := SMSHandler{Dir: dir}
	first, err := h.process(context.Background(), j.Task)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(first.File, []byte("sent\n"), 0o600); err != nil { // mark it
		t.Fatal(err)
	}
	again, err := h.process(context.Background(), j.Task)
	if err != nil || again != first {
		t.Fatalf("redelivery: %+v %v, want %+v", again, err, first)
	}
	if b, _ := os.ReadFile(first.File); string(b) != "sent\n" {
		t.Fatal("the redelivery sent again")
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "*.json")); len(files) != 1 {
		t.Fatalf("outbox %v, want one message", files)
	}
}
