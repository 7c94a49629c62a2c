package outbox

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/onceq/onceq/tasks"
)

// The outbox writes one file per key; a redelivery finds it and sends
// nothing twice, and the next incarnation's key is a new message.
func TestSMSSenderWritesOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	o := SMSSender{Dir: dir}
	ctx := context.Background()
	m := tasks.SMS{To: "+4915112345678", Body: "hi"}
	first, err := o.Send(ctx, "sms:send/otp-9", m)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, first+".json")
	if b, err := os.ReadFile(file); err != nil || !strings.Contains(string(b), `"key":"sms:send/otp-9"`) {
		t.Fatalf("outbox file %s: %q %v, want the message and its key", file, b, err)
	}
	if err := os.WriteFile(file, []byte("sent\n"), 0o600); err != nil { // mark it
		t.Fatal(err)
	}
	again, err := o.Send(ctx, "sms:send/otp-9", m)
	if err != nil || again != first {
		t.Fatalf("redelivery: %q %v, want %q", again, err, first)
	}
	if b, _ := os.ReadFile(file); string(b) != "sent\n" {
		t.Fatal("the redelivery sent again")
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "*.json")); len(files) != 1 {
		t.Fatalf("outbox %v, want one message", files)
	}
	next, err := o.Send(ctx, "sms:send/otp-9#2", m)
	if err != nil || next == first {
		t.Fatalf("next incarnation: %q %v, want a message other than %q", next, err, first)
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "*.json")); len(files) != 2 {
		t.Fatalf("outbox %v, want two messages", files)
	}
}

// The SMS handler on the outbox: a job delivered twice is one message.
func TestSMSHandlerOutboxWritesOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	c, err := tasks.NewCatalog(tasks.Windows{})
	if err != nil {
		t.Fatal(err)
	}
	j, err := c.Build(tasks.TypeSMS, []byte(`{"to":"+4915112345678","body":"hi"}`), "otp-9", "")
	if err != nil {
		t.Fatal(err)
	}
	h := tasks.SMSHandler{Sender: SMSSender{Dir: dir}}
	for range 2 {
		if err := h.ProcessTask(context.Background(), j.Task); err != nil {
			t.Fatal(err)
		}
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "*.json")); len(files) != 1 {
		t.Fatalf("outbox %v, want one message", files)
	}
}
