package tasks

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"mime"
	"mime/quotedprintable"
	"net"
	"net/mail"
	"net/smtp"
	"net/textproto"
	"os"
	"strings"
	"time"
)

// ErrRejected is wrapped by Send when the server refused this message for
// good (a 5xx reply to MAIL, RCPT or DATA): sending it again cannot succeed.
var ErrRejected = errors.New("message rejected")

// Message is one email ready to send.
type Message struct {
	MessageID string // "<id@host>"
	From      string // empty: the Mailer's default
	To        string
	Subject   string
	Body      string
}

// Mailer delivers a Message. Implementations should treat a Message-ID they
// already delivered as delivered, as an MTA does.
type Mailer interface {
	Send(ctx context.Context, m Message) error
}

var (
	_ Mailer = SMTPMailer{}
	_ Mailer = OutboxMailer{}
)

// SMTPMailer sends through an SMTP server with net/smtp.
type SMTPMailer struct {
	Addr     string // host:port
	User     string // empty: no AUTH
	Password string
	From     string // sender when Message.From is empty
	// TLSConfig for STARTTLS, e.g. a private CA. Default: system roots,
	// ServerName from Addr.
	TLSConfig *tls.Config
	// Timeout bounds one Send when ctx has no earlier deadline. Default: 1m.
	Timeout time.Duration
}

// Send delivers m. STARTTLS is used whenever the server offers it; with
// credentials it is required unless the server is on loopback, so a password
// never crosses a network in the clear.
func (s SMTPMailer) Send(ctx context.Context, m Message) error {
	from := m.From
	if from == "" {
		from = s.From
	}
	raw, sender, rcpt, err := buildMessage(m, from, time.Now())
	if err != nil {
		return err
	}
	host, _, err := net.SplitHostPort(s.Addr)
	if err != nil {
		return fmt.Errorf("tasks: smtp: addr %q: %w", s.Addr, err)
	}
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", s.Addr)
	if err != nil {
		return fmt.Errorf("tasks: smtp: %w", err)
	}
	dl, _ := ctx.Deadline()
	_ = conn.SetDeadline(dl)
	// Cancellation must also interrupt a read already blocked on the server.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	c, err := smtp.NewClient(conn, host) // closes conn on error
	if err != nil {
		return s.fail(ctx, "greeting", err)
	}
	defer c.Close()
	if ok, _ := c.Extension("STARTTLS"); ok {
		cfg := &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
		if s.TLSConfig != nil {
			cfg = s.TLSConfig.Clone()
			if cfg.ServerName == "" {
				cfg.ServerName = host
			}
		}
		if err := c.StartTLS(cfg); err != nil {
			return s.fail(ctx, "starttls", err)
		}
	} else if s.User != "" && !isLoopback(host) {
		return fmt.Errorf("tasks: smtp: %s does not offer STARTTLS; refusing to send credentials in the clear", s.Addr)
	}
	if s.User != "" {
		if err := c.Auth(smtp.PlainAuth("", s.User, s.Password, host)); err != nil {
			return s.fail(ctx, "auth", err)
		}
	}
	if err := c.Mail(sender); err != nil {
		return s.fail(ctx, "mail from", rejected(err))
	}
	if err := c.Rcpt(rcpt); err != nil {
		return s.fail(ctx, "rcpt to", rejected(err))
	}
	w, err := c.Data()
	if err != nil {
		return s.fail(ctx, "data", rejected(err))
	}
	if _, err := w.Write(raw); err != nil {
		return s.fail(ctx, "data", err)
	}
	if err := w.Close(); err != nil {
		return s.fail(ctx, "data", rejected(err))
	}
	// The server accepted the message: a failing QUIT must not cause a resend.
	_ = c.Quit()
	return nil
}

func (s SMTPMailer) fail(ctx context.Context, step string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("tasks: smtp %s: %w: %w", step, ctx.Err(), err)
	}
	return fmt.Errorf("tasks: smtp %s: %w", step, err)
}

// rejected marks a permanent (5xx) SMTP reply. 4xx replies stay retryable.
func rejected(err error) error {
	var te *textproto.Error
	if errors.As(err, &te) && te.Code >= 500 && te.Code < 600 {
		return fmt.Errorf("%w: %w", ErrRejected, err)
	}
	return err
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// buildMessage renders m as RFC 5322 with CRLF line ends and returns it with
// the envelope sender and recipient.
func buildMessage(m Message, from string, now time.Time) (raw []byte, sender, rcpt string, err error) {
	// The sender is configuration, not payload: its errors stay retryable,
	// so mail goes out once the configuration is fixed.
	if from == "" {
		return nil, "", "", errors.New("tasks: mail: no sender configured")
	}
	fromAddr, err := mail.ParseAddress(from)
	if err != nil {
		return nil, "", "", fmt.Errorf("tasks: mail: sender %q: %w", from, err)
	}
	toAddr, err := mail.ParseAddress(m.To)
	if err != nil {
		return nil, "", "", fmt.Errorf("tasks: mail: %w: to %q: %v", ErrInvalid, m.To, err)
	}
	if strings.ContainsAny(m.MessageID+m.Subject, "\r\n") {
		return nil, "", "", fmt.Errorf("tasks: mail: %w: header contains CR or LF", ErrInvalid)
	}
	var b bytes.Buffer
	header := func(k, v string) { b.WriteString(k + ": " + v + "\r\n") }
	header("Message-ID", m.MessageID)
	header("Date", now.Format(time.RFC1123Z))
	header("From", fromAddr.String())
	header("To", toAddr.String())
	header("Subject", mime.QEncoding.Encode("utf-8", m.Subject))
	header("MIME-Version", "1.0")
	header("Content-Type", "text/plain; charset=utf-8")
	// Quoted-printable keeps any body within the 998-byte line limit.
	header("Content-Transfer-Encoding", "quoted-printable")
	b.WriteString("\r\n")
	qp := quotedprintable.NewWriter(&b)
	body := strings.ReplaceAll(m.Body, "\r\n", "\n")
	if _, err := qp.Write([]byte(strings.ReplaceAll(body, "\n", "\r\n"))); err != nil {
		return nil, "", "", err
	}
	if err := qp.Close(); err != nil {
		return nil, "", "", err
	}
	if !bytes.HasSuffix(b.Bytes(), []byte("\r\n")) {
		b.WriteString("\r\n")
	}
	return b.Bytes(), fromAddr.Address, toAddr.Address, nil
}

// OutboxMailer writes each message as an .eml file in Dir instead of sending
// it: the delivery for development and the embedded default. A Message-ID it
// already wrote is not written again.
type OutboxMailer struct {
	Dir string
}

// outboxFrom is the sender of outbox mail that names none.
const outboxFrom = "onceq@localhost"

// Send writes m to Dir/<hex>.eml, atomically, unless it is already there.
func (o OutboxMailer) Send(ctx context.Context, m Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	from := m.From
	if from == "" {
		from = outboxFrom
	}
	raw, _, _, err := buildMessage(m, from, time.Now())
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.Dir, 0o750); err != nil {
		return fmt.Errorf("tasks: outbox: %w", err)
	}
	// Every name is resolved inside Dir: nothing in a message can place a file elsewhere.
	root, err := os.OpenRoot(o.Dir)
	if err != nil {
		return fmt.Errorf("tasks: outbox: %w", err)
	}
	defer root.Close()
	name := outboxName(m.MessageID)
	if _, err := root.Stat(name); err == nil {
		return nil
	}
	tmp, err := writeTemp(root, raw)
	if err != nil {
		return fmt.Errorf("tasks: outbox: %w", err)
	}
	defer root.Remove(tmp)
	// Link, unlike rename, fails if name exists: of two concurrent writers
	// exactly one publishes, and a published file is never replaced.
	err = root.Link(tmp, name)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err != nil {
		// No hard links on this filesystem: rename is still atomic.
		err = root.Rename(tmp, name)
	}
	if err != nil {
		return fmt.Errorf("tasks: outbox: %w", err)
	}
	return nil
}

// outboxName is a file name made of hex digits only, whatever the Message-ID holds.
func outboxName(messageID string) string {
	sum := sha256.Sum256([]byte(messageID))
	return hex.EncodeToString(sum[:]) + ".eml"
}

func writeTemp(root *os.Root, data []byte) (string, error) {
	for range 10 {
		name := ".tmp-" + rand.Text()
		f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		_, werr := f.Write(data)
		serr := f.Sync()
		cerr := f.Close()
		if err := errors.Join(werr, serr, cerr); err != nil {
			root.Remove(name)
			return "", err
		}
		return name, nil
	}
	return "", errors.New("cannot create a temporary file")
}

// Count is the number of messages in the outbox.
func (o OutboxMailer) Count() (int, error) {
	entries, err := os.ReadDir(o.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("tasks: outbox: %w", err)
	}
	n := 0
	for _, e := range entries {
		if e.Type().IsRegular() && strings.HasSuffix(e.Name(), ".eml") && !strings.HasPrefix(e.Name(), ".") {
			n++
		}
	}
	return n, nil
}
