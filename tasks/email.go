package tasks

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/mail"
	"strings"
	"unicode/utf8"

	"github.com/hibiken/asynq"
	"go.uber.org/zap"

	"github.com/onceq/onceq/dedup"
)

// TypeEmail sends one email.
const TypeEmail = "email:send"

// Limits of an Email. A header line may not exceed 998 bytes (RFC 5322 2.1.1).
const (
	MaxSubjectBytes = 998
	MaxBodyBytes    = 1 << 20
)

// Email is the payload of TypeEmail. ID, when set, is the business key
// ("welcome-evt_123"); without it the key is the content hash.
type Email struct {
	ID      string `json:"id,omitempty"`
	To      string `json:"to"`
	Subject string `json:"subject"`
	Body    string `json:"body"`
	TraceID string `json:"trace_id,omitempty" dedup:"volatile"`
}

func (e Email) validate() error {
	fail := func(format string, a ...any) error {
		return fmt.Errorf("tasks: %s: %w: "+format, append([]any{TypeEmail, dedup.ErrInvalid}, a...)...)
	}
	switch {
	case e.To == "":
		return fail("to is empty")
	case strings.ContainsAny(e.To, "\r\n"):
		return fail("to contains CR or LF")
	case len(e.Subject) > MaxSubjectBytes:
		return fail("subject is %d bytes, over %d", len(e.Subject), MaxSubjectBytes)
	case e.Subject == "" && e.Body == "":
		// Nothing to say: a typo or a lost template, never a message.
		return fail("subject and body are both empty")
	case strings.ContainsAny(e.Subject, "\r\n"):
		// A newline would let the subject inject headers.
		return fail("subject contains CR or LF")
	case len(e.Body) > MaxBodyBytes:
		return fail("body is %d bytes, over %d", len(e.Body), MaxBodyBytes)
	case !utf8.ValidString(e.To) || !utf8.ValidString(e.Subject) || !utf8.ValidString(e.Body):
		// JSON would silently replace invalid bytes; refuse instead.
		return fail("to, subject or body is not valid UTF-8")
	}
	if _, err := mail.ParseAddress(e.To); err != nil {
		return fail("to %q: %v", e.To, err)
	}
	return nil
}

// emailSpec is the email:send declaration.
func emailSpec(Windows) dedup.Spec[Email] {
	return dedup.Spec[Email]{
		// Key: id, else the Idempotency-Key, else the content hash (trace_id left out).
		Type:     TypeEmail,
		ID:       func(e Email) string { return e.ID },
		HashID:   true, // optional; a header key may be any printable string
		SetID:    func(e *Email, id string) { e.ID = id },
		Validate: Email.validate,
		// asynqmon shows an empty result as "non-printable bytes".
		WriteResult: true,
	}
}

func emailHandler(d Deps) asynq.Handler {
	return EmailHandler{Mailer: d.Mailer, From: d.From, Log: d.Log}
}

// MessageID is the Message-ID onceq gives the email of a downstream key
// (dedup.Key.Downstream: the key and its incarnation). It depends on that
// only, so a redelivered job sends the same Message-ID and a receiving MTA
// or the outbox can drop the copy, while the next incarnation of an email
// that failed for good is a new message.
func MessageID(downstream string) string {
	sum := sha256.Sum256([]byte(downstream))
	return "<" + hex.EncodeToString(sum[:])[:32] + "@onceq>"
}

// Message is one email ready to send.
type Message struct {
	MessageID string // "<id@host>"
	From      string // empty: the Mailer's default
	To        string
	Subject   string
	Body      string
}

// Mailer is the mail port: it delivers a Message. Implementations should
// treat a Message-ID they already delivered as delivered, as an MTA does.
// The adapters are in tasks/smtp and tasks/outbox.
type Mailer interface {
	Send(ctx context.Context, m Message) error
}

// ErrRejected is wrapped by a Mailer's Send when the server refused this
// message for good (a 5xx reply to MAIL, RCPT or DATA): sending it again
// cannot succeed.
var ErrRejected = errors.New("message rejected")

// EmailResult is the handler's result.
type EmailResult struct {
	MessageID string `json:"message_id"`
	To        string `json:"to"`
}

// EmailHandler sends TypeEmail tasks through Mailer.
type EmailHandler struct {
	Mailer Mailer
	// From is the sender; empty leaves it to the Mailer.
	From string
	Log  *zap.Logger
}

// ProcessTask implements asynq.Handler.
func (h EmailHandler) ProcessTask(ctx context.Context, t *asynq.Task) error {
	return dedup.Handle(Emails, h.send).ProcessTask(ctx, t)
}

func (h EmailHandler) send(ctx context.Context, e Email) (EmailResult, error) {
	key := downstream(ctx)
	if h.Mailer == nil {
		return EmailResult{}, errors.New("tasks: email handler has no Mailer")
	}
	msg := Message{MessageID: MessageID(key), From: h.From, To: e.To, Subject: e.Subject, Body: e.Body}
	if err := h.Mailer.Send(ctx, msg); err != nil {
		if errors.Is(err, ErrRejected) {
			return EmailResult{}, permanent(err)
		}
		return EmailResult{}, err
	}
	logger(h.Log).Debug("email sent", zap.String("key", key), zap.String("message_id", msg.MessageID))
	return EmailResult{MessageID: msg.MessageID, To: e.To}, nil
}
