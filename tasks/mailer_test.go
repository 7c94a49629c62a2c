package tasks

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onceq/onceq"
)

// fakeMailer records what the email handler hands its Mailer. Recipients
// starting with "reject" are refused for good, "busy" for now. The real SMTP
// adapter is tested against Mailpit in tasks/smtp.
type fakeMailer struct {
	mu   sync.Mutex
	msgs []Message
}

func (f *fakeMailer) Send(ctx context.Context, m Message) error {
	switch {
	case strings.HasPrefix(m.To, "reject"):
		return fmt.Errorf("fake: 550 no such user: %w", ErrRejected)
	case strings.HasPrefix(m.To, "busy"):
		return errors.New("fake: 451 try again later")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.msgs = append(f.msgs, m)
	return nil
}

func (f *fakeMailer) Messages() []Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Message(nil), f.msgs...)
}

func testMessage(to string) Message {
	return Message{
		MessageID: "<0123456789abcdef0123456789abcdef@onceq>",
		From:      "Sender <sender@example.com>",
		To:        to,
		Subject:   "Grüße from onceq",
		Body:      "line one\n.leading dot\n" + strings.Repeat("x", 2000) + "\n",
	}
}

func TestBuildMessageRejectsHeaderInjection(t *testing.T) {
	t.Parallel()
	for _, m := range []Message{
		{MessageID: "<a@b>", To: "bob@example.com", Subject: "hi\r\nBcc: eve@example.com"},
		{MessageID: "<a@b>\nBcc: eve@example.com", To: "bob@example.com"},
		{MessageID: "<a@b>", To: "bob@example.com\r\nBcc: eve@example.com"},
	} {
		if _, _, _, err := buildMessage(m, "a@example.com", time.Now()); !errors.Is(err, onceq.ErrInvalid) {
			t.Errorf("buildMessage(%q) = %v, want onceq.ErrInvalid", m, err)
		}
	}
}

func TestOutboxMailer(t *testing.T) {
	t.Parallel()
	parent := t.TempDir()
	dir := filepath.Join(parent, "outbox")
	o := OutboxMailer{Dir: dir}
	ctx := context.Background()
	first := testMessage("bob@example.com")
	if err := o.Send(ctx, first); err != nil {
		t.Fatalf("Send: %v", err)
	}
	path := filepath.Join(dir, outboxName(first.MessageID))
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

func TestOutboxConcurrentSendsWriteOnce(t *testing.T) {
	t.Parallel()
	o := OutboxMailer{Dir: t.TempDir()}
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

func TestOutboxCountMissingDir(t *testing.T) {
	t.Parallel()
	if n, err := (OutboxMailer{Dir: filepath.Join(t.TempDir(), "nope")}).Count(); n != 0 || err != nil {
		t.Fatalf("Count of a missing outbox = %d, %v; want 0, nil", n, err)
	}
}
