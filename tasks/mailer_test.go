package tasks

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"errors"
	"io"
	"math/big"
	"mime"
	"mime/quotedprintable"
	"net"
	"net/mail"
	"net/textproto"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeSMTP is a loopback SMTP server speaking just enough of the protocol
// for net/smtp: EHLO, STARTTLS (when tlsConfig is set), AUTH PLAIN, MAIL,
// RCPT, DATA, RSET, NOOP, QUIT. Recipients starting with "reject" get 550,
// "busy" get 451.
type fakeSMTP struct {
	Addr     string
	password string
	tlsCfg   *tls.Config
	// connected, if set, receives each accepted connection before the greeting;
	// with silent, the server then never answers.
	connected chan struct{}
	silent    bool

	mu   sync.Mutex
	msgs []smtpMsg
}

type smtpMsg struct {
	From, To string
	Data     string
	TLS      bool
	AuthUser string
}

func startSMTP(t *testing.T, f *fakeSMTP) *fakeSMTP {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.Addr = ln.Addr().String()
	var wg sync.WaitGroup
	done := make(chan struct{})
	t.Cleanup(func() {
		close(done)
		ln.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				// Unblock a silent connection when the test ends.
				go func() { <-done; c.Close() }()
				f.serve(c)
			})
		}
	})
	return f
}

func (f *fakeSMTP) Messages() []smtpMsg {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]smtpMsg(nil), f.msgs...)
}

func (f *fakeSMTP) serve(c net.Conn) {
	if f.connected != nil {
		f.connected <- struct{}{}
	}
	if f.silent {
		var b [1]byte
		c.Read(b[:]) // until the client or the test closes
		return
	}
	tp := textproto.NewConn(c)
	tp.PrintfLine("220 fake ESMTP")
	var cur smtpMsg
	for {
		line, err := tp.ReadLine()
		if err != nil {
			return
		}
		verb, arg, _ := strings.Cut(line, " ")
		switch strings.ToUpper(verb) {
		case "EHLO", "HELO":
			lines := []string{"fake"}
			if f.tlsCfg != nil && !cur.TLS {
				lines = append(lines, "STARTTLS")
			}
			lines = append(lines, "AUTH PLAIN", "8BITMIME")
			for i, l := range lines {
				sep := "-"
				if i == len(lines)-1 {
					sep = " "
				}
				tp.PrintfLine("250%s%s", sep, l)
			}
		case "STARTTLS":
			tp.PrintfLine("220 go ahead")
			tc := tls.Server(c, f.tlsCfg)
			if tc.Handshake() != nil {
				return
			}
			c, tp, cur.TLS = tc, textproto.NewConn(tc), true
		case "AUTH":
			mech, b64, _ := strings.Cut(arg, " ")
			raw, err := base64.StdEncoding.DecodeString(b64)
			parts := strings.Split(string(raw), "\x00")
			if mech != "PLAIN" || err != nil || len(parts) != 3 || parts[2] != f.password {
				tp.PrintfLine("535 authentication failed")
				continue
			}
			cur.AuthUser = parts[1]
			tp.PrintfLine("235 ok")
		case "MAIL":
			cur.From = angle(arg)
			tp.PrintfLine("250 ok")
		case "RCPT":
			cur.To = angle(arg)
			switch {
			case strings.HasPrefix(cur.To, "reject"):
				tp.PrintfLine("550 no such user")
			case strings.HasPrefix(cur.To, "busy"):
				tp.PrintfLine("451 try again later")
			default:
				tp.PrintfLine("250 ok")
			}
		case "DATA":
			tp.PrintfLine("354 go ahead")
			data, err := tp.ReadDotBytes()
			if err != nil {
				return
			}
			m := cur
			m.Data = string(data)
			f.mu.Lock()
			f.msgs = append(f.msgs, m)
			f.mu.Unlock()
			tp.PrintfLine("250 queued")
		case "RSET", "NOOP":
			tp.PrintfLine("250 ok")
		case "QUIT":
			tp.PrintfLine("221 bye")
			return
		default:
			tp.PrintfLine("502 not implemented")
		}
	}
}

func angle(arg string) string {
	_, rest, _ := strings.Cut(arg, "<")
	addr, _, _ := strings.Cut(rest, ">")
	return addr
}

// loopbackCert is a self-signed certificate for 127.0.0.1 and a pool trusting it.
func loopbackCert(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "fake smtp"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pool
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

func TestSMTPMailerSTARTTLSAndAuth(t *testing.T) {
	t.Parallel()
	cert, pool := loopbackCert(t)
	srv := startSMTP(t, &fakeSMTP{password: "s3cret", tlsCfg: &tls.Config{Certificates: []tls.Certificate{cert}}})
	m := SMTPMailer{Addr: srv.Addr, User: "alice", Password: "s3cret", TLSConfig: &tls.Config{RootCAs: pool}}
	if err := m.Send(context.Background(), testMessage("bob@example.com")); err != nil {
		t.Fatalf("Send: %v", err)
	}
	msgs := srv.Messages()
	if len(msgs) != 1 {
		t.Fatalf("server got %d messages, want 1", len(msgs))
	}
	got := msgs[0]
	if !got.TLS || got.AuthUser != "alice" || got.From != "sender@example.com" || got.To != "bob@example.com" {
		t.Errorf("got TLS=%v auth=%q from=%q to=%q; want TLS, alice, sender@, bob@", got.TLS, got.AuthUser, got.From, got.To)
	}
	pm, err := mail.ReadMessage(strings.NewReader(got.Data))
	if err != nil {
		t.Fatalf("parse message: %v", err)
	}
	want := map[string]string{
		"Message-Id":   "<0123456789abcdef0123456789abcdef@onceq>",
		"Mime-Version": "1.0",
		"Content-Type": "text/plain; charset=utf-8",
		"To":           "<bob@example.com>",
	}
	for k, v := range want {
		if g := pm.Header.Get(k); g != v {
			t.Errorf("header %s = %q, want %q", k, g, v)
		}
	}
	if subj, err := new(mime.WordDecoder).DecodeHeader(pm.Header.Get("Subject")); err != nil || subj != "Grüße from onceq" {
		t.Errorf("Subject decodes to %q (%v)", subj, err)
	}
	if _, err := pm.Header.Date(); err != nil {
		t.Errorf("Date: %v", err)
	}
	body, err := io.ReadAll(quotedprintable.NewReader(pm.Body))
	if err != nil {
		t.Fatal(err)
	}
	// The server's DotReader turned the wire's CRLF back into LF.
	if wantBody := testMessage("").Body; string(body) != wantBody {
		t.Errorf("body round trip differs:\n got %q\nwant %q", truncate(body, 80), truncate([]byte(wantBody), 80))
	}
	for line := range strings.SplitSeq(got.Data, "\n") {
		if len(line) > 998 {
			t.Errorf("line of %d bytes exceeds RFC 5322's 998", len(line))
		}
	}
}

func TestSMTPMailerPlainAuthOnLoopback(t *testing.T) {
	t.Parallel()
	srv := startSMTP(t, &fakeSMTP{password: "pw"})
	m := SMTPMailer{Addr: srv.Addr, User: "u", Password: "pw", From: "ops@example.com"}
	msg := testMessage("bob@example.com")
	msg.From = ""
	if err := m.Send(context.Background(), msg); err != nil {
		t.Fatalf("Send: %v", err)
	}
	got := srv.Messages()
	if len(got) != 1 || got[0].TLS || got[0].AuthUser != "u" || got[0].From != "ops@example.com" {
		t.Fatalf("got %+v; want one plain message authenticated as u from the mailer's From", got)
	}
}

func TestSMTPMailerErrors(t *testing.T) {
	t.Parallel()
	srv := startSMTP(t, &fakeSMTP{password: "pw"})
	tests := []struct {
		name      string
		mailer    SMTPMailer
		to        string
		rejected  bool
		wantInErr string
	}{
		{"550 is permanent", SMTPMailer{Addr: srv.Addr}, "reject@example.com", true, "550"},
		{"451 is temporary", SMTPMailer{Addr: srv.Addr}, "busy@example.com", false, "451"},
		{"wrong password is not a rejection", SMTPMailer{Addr: srv.Addr, User: "u", Password: "bad"}, "bob@example.com", false, "535"},
		{"bad addr", SMTPMailer{Addr: "no-port"}, "bob@example.com", false, "addr"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.mailer.Send(context.Background(), testMessage(tt.to))
			if err == nil {
				t.Fatal("Send succeeded, want an error")
			}
			if errors.Is(err, ErrRejected) != tt.rejected {
				t.Errorf("errors.Is(err, ErrRejected) = %v, want %v (err: %v)", !tt.rejected, tt.rejected, err)
			}
			if !strings.Contains(err.Error(), tt.wantInErr) {
				t.Errorf("error %q does not mention %q", err, tt.wantInErr)
			}
		})
	}
	if n := len(srv.Messages()); n != 0 {
		t.Errorf("server recorded %d messages, want 0", n)
	}
}

func TestSMTPMailerHonoursCancel(t *testing.T) {
	t.Parallel()
	connected := make(chan struct{}, 1)
	srv := startSMTP(t, &fakeSMTP{connected: connected, silent: true})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- SMTPMailer{Addr: srv.Addr}.Send(ctx, testMessage("bob@example.com")) }()
	<-connected // the client now waits for a greeting that never comes
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Send after cancel = %v, want context.Canceled", err)
	}
}

func TestIsLoopback(t *testing.T) {
	t.Parallel()
	for host, want := range map[string]bool{
		"localhost": true, "127.0.0.1": true, "127.1.2.3": true, "::1": true,
		"10.0.0.1": false, "smtp.example.com": false, "": false, "localhost.example.com": false,
	} {
		if got := isLoopback(host); got != want {
			t.Errorf("isLoopback(%q) = %v, want %v", host, got, want)
		}
	}
}

func TestBuildMessageRejectsHeaderInjection(t *testing.T) {
	t.Parallel()
	for _, m := range []Message{
		{MessageID: "<a@b>", To: "bob@example.com", Subject: "hi\r\nBcc: eve@example.com"},
		{MessageID: "<a@b>\nBcc: eve@example.com", To: "bob@example.com"},
		{MessageID: "<a@b>", To: "bob@example.com\r\nBcc: eve@example.com"},
	} {
		if _, _, _, err := buildMessage(m, "a@example.com", time.Now()); !errors.Is(err, ErrInvalid) {
			t.Errorf("buildMessage(%q) = %v, want ErrInvalid", m, err)
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
		t.Errorf("outbox file lacks the Message-ID header or holds the second body:\n%s", truncate(data, 300))
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
