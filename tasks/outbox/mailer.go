package outbox

import (
	"bytes"
	"context"
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

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/tasks"
)

// defaultFrom is the sender of outbox mail that names none.
const defaultFrom = "onceq@localhost"

// Mailer is the tasks.Mailer that writes each message as an .eml file in
// Dir. A Message-ID it already wrote is not written again, as an MTA drops
// a copy. Safe for concurrent use, across processes too.
type Mailer struct {
	Dir string
}

var _ tasks.Mailer = Mailer{}

// Send writes m to Dir/<hex>.eml, atomically, unless it is already there.
func (o Mailer) Send(ctx context.Context, m tasks.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	from := m.From
	if from == "" {
		from = defaultFrom
	}
	raw, err := buildMessage(m, from, time.Now())
	if err != nil {
		return err
	}
	if err := writeOnce(o.Dir, mailName(m.MessageID), raw); err != nil {
		return fmt.Errorf("outbox: mail: %w", err)
	}
	return nil
}

// Count is the number of messages in the outbox.
func (o Mailer) Count() (int, error) {
	entries, err := os.ReadDir(o.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("outbox: mail: %w", err)
	}
	n := 0
	for _, e := range entries {
		if e.Type().IsRegular() && strings.HasSuffix(e.Name(), ".eml") && !strings.HasPrefix(e.Name(), ".") {
			n++
		}
	}
	return n, nil
}

// mailName is a file name made of hex digits only, whatever the Message-ID holds.
func mailName(messageID string) string {
	sum := sha256.Sum256([]byte(messageID))
	return hex.EncodeToString(sum[:]) + ".eml"
}

// buildMessage renders m from the sender from as RFC 5322 with CRLF line ends.
func buildMessage(m tasks.Message, from string, now time.Time) ([]byte, error) {
	fromAddr, err := mail.ParseAddress(from)
	if err != nil {
		return nil, fmt.Errorf("outbox: mail: sender %q: %w", from, err)
	}
	toAddr, err := mail.ParseAddress(m.To)
	if err != nil {
		return nil, fmt.Errorf("outbox: mail: %w: to %q: %v", dedup.ErrInvalid, m.To, err)
	}
	if strings.ContainsAny(m.MessageID+m.Subject, "\r\n") {
		return nil, fmt.Errorf("outbox: mail: %w: header contains CR or LF", dedup.ErrInvalid)
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
		return nil, err
	}
	if err := qp.Close(); err != nil {
		return nil, err
	}
	if !bytes.HasSuffix(b.Bytes(), []byte("\r\n")) {
		b.WriteString("\r\n")
	}
	return b.Bytes(), nil
}
