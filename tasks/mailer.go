package tasks

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"mime"
	"mime/quotedprintable"
	"net/mail"
	"os"
	"strings"
	"time"

	"github.com/onceq/onceq"
)

// ErrRejected is wrapped by a Mailer's Send when the server refused this
// message for good (a 5xx reply to MAIL, RCPT or DATA): sending it again
// cannot succeed. The SMTP adapter is in tasks/smtp.
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

var _ Mailer = OutboxMailer{}

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
		return nil, "", "", fmt.Errorf("tasks: mail: %w: to %q: %v", onceq.ErrInvalid, m.To, err)
	}
	if strings.ContainsAny(m.MessageID+m.Subject, "\r\n") {
		return nil, "", "", fmt.Errorf("tasks: mail: %w: header contains CR or LF", onceq.ErrInvalid)
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
