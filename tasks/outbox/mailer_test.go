package outbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/testenv"
	"github.com/onceq/onceq/tasks"
)

func testMessage(to string) tasks.Message {
	return tasks.Message{
		MessageID: "<0123456789abcdef0123456789abcdef@onceq>",
		From:      "Sender <sender@example.com>",
		To:        to,
		Subject:   "Grüße from onceq",
		Body:      "line one\n.leading dot\n" + strings.Repeat("x", 2000) + "\n",
	}
}

func TestBuildMessageRejectsHeaderInjection(t *testing.T) {
	t.Parallel()
	for _, m := range []tasks.Message{
		{MessageID: "<a@b>", To: "bob@example.com", Subject: "hi\r\nBcc: eve@example.com"},
		{MessageID: "<a@b>\nBcc: eve@example.com", To: "bob@example.com"},
		{MessageID: "<a@b>", To: "bob@example.com\r\nBcc: eve@example.com"},
	} {
		if _, err := buildMessage(m, "a@example.com", time.Now()); !errors.Is(err, dedup.ErrInvalid) {
			t.Errorf("buildMessage(%q) = %v, want dedup.ErrInvalid", m, err)
		}
	}
}

func TestMailer(t *testing.T) {
	t.Parallel()
	parent := t.TempDir()
	dir := filepath.Join(parent, "outbox")
	o := Mailer{Dir: dir}
	ctx := context.Background()
	first := testMessage("bob@example.com")
	if err := o.Send(ctx, first); err != nil {
		t.Fatalf("Send: %v", err)
	}
	path := filepath.Join(dir, mailName(first.MessageID))
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	// Same Message-ID, other body: the outbox keeps the first, as an MTA would.
	resent := first
	resent.Body = "a different body"
	if err := o.Send(ctx, resent); err != nil {
		t.Fatalf("Send: %v", err)
	}
	if n, err := o.Count(); err != nil || n != 1 {
		t.Fatalf("Count after two sends of one Message-ID = %d, %v; want 1", n, err)
	}
	after, err := os.Stat(path)
	if err != nil || !os.SameFile(before, after) {
		t.Errorf("the second send replaced the file (%v)", err)
	}
	// A hostile Message-ID cannot name a path: the file is still in Dir.
	evil := testMessage("bob@example.com")
	evil.MessageID = "<../../escape@onceq>"
	if err := o.Send(ctx, evil); err != nil {
		t.Fatalf("Send: %v", err)
	}
	if n, err := o.Count(); err != nil || n != 2 {
		t.Fatalf("Count = %d, %v; want 2", n, err)
	}
	if entries, _ := os.ReadDir(parent); len(entries) != 1 || entries[0].Name() != "outbox" {
		t.Errorf("parent of Dir holds %v, want only outbox", entries)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	hexName := regexp.MustCompile(`^[0-9a-f]{64}\.eml$`)
	for _, e := range entries {
		if !hexName.MatchString(e.Name()) {
			t.Errorf("outbox holds %q; want only <hex>.eml files, no temp files", e.Name())
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "Message-ID: "+first.MessageID+"\r\n") || strings.Contains(string(data), "different") {
		t.Errorf("outbox file lacks the Message-ID header or holds the second body:\n%.300s", data)
	}
}

func TestMailerConcurrentSendsWriteOnce(t *testing.T) {
	t.Parallel()
	o := Mailer{Dir: t.TempDir()}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Go(func() { errs <- o.Send(context.Background(), testMessage("bob@example.com")) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("Send: %v", err)
		}
	}
	if n, err := o.Count(); err != nil || n != 1 {
		t.Fatalf("Count = %d, %v; want 1", n, err)
	}
}

func TestMailerCountMissingDir(t *testing.T) {
	t.Parallel()
	if n, err := (Mailer{Dir: filepath.Join(t.TempDir(), "nope")}).Count(); n != 0 || err != nil {
		t.Fatalf("Count of a missing outbox = %d, %v; want 0, nil", n, err)
	}
}

// The email handler on the outbox: a redelivery after a crash between the
// send and Complete writes nothing twice.
func TestEmailHandlerOutboxDedups(t *testing.T) {
	t.Parallel()
	o := Mailer{Dir: t.TempDir()}
	h := tasks.EmailHandler{Mailer: o}
	job, err := testenv.Job(tasks.Emails.Job(tasks.Email{ID: "welcome-1", To: "bob@example.com", Subject: "Hi", Body: "hello"}))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := h.ProcessTask(context.Background(), job.Task); err != nil {
			t.Fatalf("ProcessTask: %v", err)
		}
	}
	if n, err := o.Count(); err != nil || n != 1 {
		t.Fatalf("outbox Count = %d, %v; want 1", n, err)
	}
}
