package smtp

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"mime"
	"mime/quotedprintable"
	"net"
	"net/mail"
	"strings"
	"testing"

	gomail "github.com/wneessen/go-mail"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/peertest"
	"github.com/onceq/onceq/tasks"
)

func testMessage(to string) tasks.Message {
	k, _ := dedup.NewKey(tasks.TypeEmail, "welcome-1")
	return tasks.Message{
		MessageID: tasks.MessageID(k.String()),
		From:      "Sender <sender@example.com>",
		To:        to,
		Subject:   "Grüße from onceq",
		Body:      "line one\n.leading dot\n" + strings.Repeat("x", 2000) + "\n",
	}
}

func newMailer(t *testing.T, o Options) *Mailer {
	t.Helper()
	m, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// STARTTLS and AUTH against Mailpit, which requires both: the message
// arrives once, with the key's Message-ID and proper MIME.
func TestSendSTARTTLSAndAuth(t *testing.T) {
	t.Parallel()
	mp := peertest.StartMailpit(t, peertest.MailpitOptions{TLS: true, User: "alice", Password: "s3cret"})
	m := newMailer(t, Options{Addr: mp.SMTPAddr, User: "alice", Password: "s3cret", TLSConfig: &tls.Config{RootCAs: mp.RootCAs}})
	msg := testMessage("bob@example.com")
	if err := m.Send(context.Background(), msg); err != nil {
		t.Fatalf("Send: %v", err)
	}
	got := mp.Messages(t)
	if len(got) != 1 || mp.Count(t, msg.MessageID) != 1 {
		t.Fatalf("Mailpit has %d messages, %d with %s; want 1, 1", len(got), mp.Count(t, msg.MessageID), msg.MessageID)
	}
	if got[0].From.Address != "sender@example.com" || len(got[0].To) != 1 || got[0].To[0].Address != "bob@example.com" ||
		got[0].Subject != "Grüße from onceq" {
		t.Errorf("Mailpit saw %+v", got[0])
	}
	pm, err := mail.ReadMessage(strings.NewReader(mp.Raw(t, got[0])))
	if err != nil {
		t.Fatalf("parse message: %v", err)
	}
	if g := pm.Header.Get("Message-Id"); g != msg.MessageID {
		t.Errorf("Message-ID = %q, want %q", g, msg.MessageID)
	}
	if g := pm.Header.Get("Mime-Version"); g != "1.0" {
		t.Errorf("MIME-Version = %q", g)
	}
	if mt, params, err := mime.ParseMediaType(pm.Header.Get("Content-Type")); err != nil || mt != "text/plain" || !strings.EqualFold(params["charset"], "utf-8") {
		t.Errorf("Content-Type = %q", pm.Header.Get("Content-Type"))
	}
	if _, err := pm.Header.Date(); err != nil {
		t.Errorf("Date: %v", err)
	}
	if enc := pm.Header.Get("Content-Transfer-Encoding"); !strings.EqualFold(enc, "quoted-printable") {
		t.Fatalf("Content-Transfer-Encoding = %q", enc)
	}
	body, err := io.ReadAll(quotedprintable.NewReader(pm.Body))
	if err != nil {
		t.Fatal(err)
	}
	want := strings.ReplaceAll(msg.Body, "\n", "\r\n")
	if got := string(body); got != want && got != msg.Body {
		t.Errorf("body round trip differs: got %d bytes %q...", len(got), got[:min(len(got), 60)])
	}
}

// On loopback, AUTH may go without TLS; the Mailer's From fills in.
func TestSendPlainAuthOnLoopback(t *testing.T) {
	t.Parallel()
	mp := peertest.StartMailpit(t, peertest.MailpitOptions{User: "u", Password: "pw"})
	m := newMailer(t, Options{Addr: mp.SMTPAddr, User: "u", Password: "pw", From: "ops@example.com"})
	msg := testMessage("bob@example.com")
	msg.From = ""
	if err := m.Send(context.Background(), msg); err != nil {
		t.Fatalf("Send: %v", err)
	}
	got := mp.Messages(t)
	if len(got) != 1 || got[0].From.Address != "ops@example.com" {
		t.Fatalf("Mailpit has %+v; want one message from ops@example.com", got)
	}
}

// Sending twice sends twice: Mailpit, like most servers, deduplicates
// nothing. Only the dedup record in front stops the second send; the
// Message-ID lets a receiver drop the copy when that record is gone.
func TestSameMessageTwiceArrivesTwiceWithOneID(t *testing.T) {
	t.Parallel()
	mp := peertest.StartMailpit(t, peertest.MailpitOptions{})
	m := newMailer(t, Options{Addr: mp.SMTPAddr})
	msg := testMessage("bob@example.com")
	for range 2 {
		if err := m.Send(context.Background(), msg); err != nil {
			t.Fatal(err)
		}
	}
	if n := mp.Count(t, msg.MessageID); n != 2 {
		t.Fatalf("Mailpit has %d copies of %s, want 2", n, msg.MessageID)
	}
}

func TestSendErrors(t *testing.T) {
	t.Parallel()
	auth := peertest.StartMailpit(t, peertest.MailpitOptions{User: "u", Password: "pw"})
	busy := peertest.StartMailpit(t, peertest.MailpitOptions{Chaos: "Recipient:451:100"})
	reject := peertest.StartMailpit(t, peertest.MailpitOptions{Chaos: "Recipient:550:100"})
	tls := peertest.StartMailpit(t, peertest.MailpitOptions{TLS: true})
	tests := []struct {
		name      string
		opts      Options
		rejected  bool
		wantInErr string
	}{
		{"550 is permanent", Options{Addr: reject.SMTPAddr}, true, "550"},
		{"451 is temporary", Options{Addr: busy.SMTPAddr}, false, "451"},
		{"wrong password is not a rejection", Options{Addr: auth.SMTPAddr, User: "u", Password: "bad"}, false, "535"},
		{"untrusted certificate", Options{Addr: tls.SMTPAddr}, false, "certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := newMailer(t, tt.opts).Send(context.Background(), testMessage("bob@example.com"))
			if err == nil {
				t.Fatal("Send succeeded, want an error")
			}
			if errors.Is(err, tasks.ErrRejected) != tt.rejected {
				t.Errorf("errors.Is(err, ErrRejected) = %v, want %v (err: %v)", !tt.rejected, tt.rejected, err)
			}
			if !strings.Contains(err.Error(), tt.wantInErr) {
				t.Errorf("error %q does not mention %q", err, tt.wantInErr)
			}
		})
	}
	for _, mp := range []*peertest.Mailpit{auth, busy, reject, tls} {
		if n := len(mp.Messages(t)); n != 0 {
			t.Errorf("Mailpit at %s kept %d messages, want 0", mp.SMTPAddr, n)
		}
	}
}

// Credentials never go in the clear beyond loopback.
func TestTLSPolicy(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		addr, user string
		want       gomail.TLSPolicy
	}{
		{"smtp.example.com:587", "u", gomail.TLSMandatory},
		{"10.0.0.1:25", "u", gomail.TLSMandatory},
		{"smtp.example.com:25", "", gomail.TLSOpportunistic},
		{"127.0.0.1:25", "u", gomail.TLSOpportunistic},
		{"[::1]:25", "u", gomail.TLSOpportunistic},
		{"localhost:25", "u", gomail.TLSOpportunistic},
		{"localhost.example.com:25", "u", gomail.TLSMandatory},
	} {
		if got := newMailer(t, Options{Addr: tt.addr, User: tt.user, Password: "pw"}).tlsPolicy(); got != tt.want {
			t.Errorf("%s with user %q: policy %v, want %v", tt.addr, tt.user, got, tt.want)
		}
	}
}

func TestHonoursCancel(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	connected := make(chan net.Conn, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			connected <- c // and never greet
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- newMailer(t, Options{Addr: ln.Addr().String()}).Send(ctx, testMessage("bob@example.com"))
	}()
	c := <-connected
	defer c.Close()
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Send after cancel = %v, want context.Canceled", err)
	}
}

func TestHeaderInjectionIsInvalid(t *testing.T) {
	t.Parallel()
	m := newMailer(t, Options{Addr: "127.0.0.1:1", From: "a@example.com"})
	for _, msg := range []tasks.Message{
		{MessageID: "<a@b>", To: "bob@example.com", Subject: "hi\r\nBcc: eve@example.com"},
		{MessageID: "<a@b>\nBcc: eve@example.com", To: "bob@example.com"},
		{MessageID: "<a@b>", To: "bob@example.com\r\nBcc: eve@example.com"},
		{MessageID: "<a@b>", To: "not an address"},
	} {
		if err := m.Send(context.Background(), msg); !errors.Is(err, dedup.ErrInvalid) {
			t.Errorf("Send(%q) = %v, want ErrInvalid", msg, err)
		}
	}
}

func TestNewChecksAddr(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"", "no-port", "host:0", "host:x"} {
		if _, err := New(Options{Addr: addr}); err == nil {
			t.Errorf("New(%q) succeeded", addr)
		}
	}
}

// Each Send is a client span under the caller's, failed when the server
// refuses the message.
func TestSendSpan(t *testing.T) {
	t.Parallel()
	ok := peertest.StartMailpit(t, peertest.MailpitOptions{})
	reject := peertest.StartMailpit(t, peertest.MailpitOptions{Chaos: "Recipient:550:100"})
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	ctx, parent := tp.Tracer("test").Start(context.Background(), "deliver")
	if err := newMailer(t, Options{Addr: ok.SMTPAddr, TracerProvider: tp}).Send(ctx, testMessage("bob@example.com")); err != nil {
		t.Fatal(err)
	}
	if err := newMailer(t, Options{Addr: reject.SMTPAddr, TracerProvider: tp}).Send(ctx, testMessage("bob@example.com")); err == nil {
		t.Fatal("Send to a refusing server succeeded")
	}
	parent.End()
	var sends []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "smtp send" {
			sends = append(sends, s)
		}
	}
	if len(sends) != 2 {
		t.Fatalf("%d smtp spans, want 2", len(sends))
	}
	for i, s := range sends {
		if s.Parent().SpanID() != parent.SpanContext().SpanID() || s.SpanKind() != trace.SpanKindClient {
			t.Errorf("span %d is not a client span under the caller's", i)
		}
		if failed := s.Status().Code == codes.Error; failed != (i == 1) {
			t.Errorf("span %d: status %v", i, s.Status())
		}
	}
	host, _, _ := net.SplitHostPort(ok.SMTPAddr)
	if got := attr(sends[0], "server.address"); got != host {
		t.Errorf("server.address = %q, want %q", got, host)
	}
}

func attr(s sdktrace.ReadOnlySpan, key string) string {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.String()
		}
	}
	return ""
}
