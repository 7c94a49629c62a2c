package tasks

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"unicode/utf8"

	"github.com/hibiken/asynq"
	"go.uber.org/zap"

	"github.com/onceq/onceq/dedup"
)

// TypeSMS sends one text message. It is the catalog's example of a new task
// type: this file (payload, Spec, handler and the port it sends through),
// its test, an adapter (tasks/outbox) and a README line are all it took.
const TypeSMS = "sms:send"

// MaxSMSBodyBytes is ten concatenated 160-byte segments.
const MaxSMSBodyBytes = 1600

var e164RE = regexp.MustCompile(`^\+[1-9][0-9]{6,14}$`)

// SMS is the payload of TypeSMS. ID, when set, is the business key;
// without it (and without an Idempotency-Key) the key is the content hash.
type SMS struct {
	ID   string `json:"id,omitempty"`
	To   string `json:"to"` // E.164, e.g. "+4915112345678"
	Body string `json:"body"`
}

func (m SMS) validate() error {
	fail := func(format string, a ...any) error {
		return fmt.Errorf("tasks: %s: %w: "+format, append([]any{TypeSMS, dedup.ErrInvalid}, a...)...)
	}
	switch {
	case !e164RE.MatchString(m.To):
		return fail("to %q is not an E.164 number (+ and 7 to 15 digits)", m.To)
	case m.Body == "":
		return fail("body is empty")
	case len(m.Body) > MaxSMSBodyBytes:
		return fail("body is %d bytes, over %d", len(m.Body), MaxSMSBodyBytes)
	case !utf8.ValidString(m.Body):
		return fail("body is not valid UTF-8")
	}
	return nil
}

// smsSpec is the sms:send declaration.
func smsSpec(Windows) dedup.Spec[SMS] {
	return dedup.Spec[SMS]{
		// Key: id, else the Idempotency-Key, else the content hash.
		Type:     TypeSMS,
		ID:       func(m SMS) string { return m.ID },
		HashID:   true, // optional; a header key may be any printable string
		SetID:    func(m *SMS, id string) { m.ID = id },
		Validate: SMS.validate,
		// asynqmon shows an empty result as "non-printable bytes".
		WriteResult: true,
	}
}

func smsHandler(d Deps) asynq.Handler {
	return SMSHandler{Sender: d.SMSSender, Log: d.Log}
}

// SMSSender is the SMS port: it sends m once per key, as an SMS provider
// with idempotency keys does, and returns the message's id; a key it has
// sent already returns the first message's id and sends nothing. The file
// adapter is in tasks/outbox.
type SMSSender interface {
	Send(ctx context.Context, key string, m SMS) (id string, err error)
}

// SMSResult is the handler's result.
type SMSResult struct {
	MessageID string `json:"message_id"`
	To        string `json:"to"`
}

// SMSHandler sends TypeSMS tasks through Sender under the downstream key
// (the idempotency key and its incarnation): a redelivery after a crash is
// the same key and sends nothing twice, and the next incarnation of a
// message that failed for good is a new message.
type SMSHandler struct {
	Sender SMSSender
	Log    *zap.Logger
}

// ProcessTask implements asynq.Handler.
func (h SMSHandler) ProcessTask(ctx context.Context, t *asynq.Task) error {
	return dedup.Handle(SMSes, h.send).ProcessTask(ctx, t)
}

func (h SMSHandler) send(ctx context.Context, m SMS) (SMSResult, error) {
	key := downstream(ctx)
	if h.Sender == nil {
		return SMSResult{}, errors.New("tasks: sms handler has no SMSSender")
	}
	id, err := h.Sender.Send(ctx, key, m)
	if err != nil {
		return SMSResult{}, err
	}
	logger(h.Log).Debug("sms sent", zap.String("key", key), zap.String("message_id", id))
	return SMSResult{MessageID: id, To: m.To}, nil
}
