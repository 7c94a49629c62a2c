package tasks

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"unicode/utf8"

	"github.com/hibiken/asynq"
	"go.uber.org/zap"

	"github.com/onceq/onceq"
)

// TypeSMS sends one text message. It is the catalog's example of a new task
// type: this file, its test and a README line are all it took.
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
		return fmt.Errorf("tasks: %s: %w: "+format, append([]any{TypeSMS, onceq.ErrInvalid}, a...)...)
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
func smsSpec(Windows) onceq.Spec[SMS] {
	return onceq.Spec[SMS]{
		Type:     TypeSMS,
		Route:    "sms",
		KeyRule:  "`id`, else the Idempotency-Key, else the content hash",
		ID:       func(m SMS) string { return m.ID },
		SetID:    func(m *SMS, id string) { m.ID = id },
		Validate: SMS.validate,
	}
}

func smsHandler(d Deps) asynq.Handler {
	dir := d.OutboxDir
	if dir == "" {
		dir = "outbox"
	}
	return SMSHandler{Dir: filepath.Join(dir, "sms"), Log: d.Log}
}

// SMSResult is the handler's result.
type SMSResult struct {
	MessageID string `json:"message_id"`
	To        string `json:"to"`
	File      string `json:"file"`
}

// SMSHandler "sends" by writing one JSON file per downstream key (the
// idempotency key and its incarnation) to Dir,
// created exclusively: a redelivery after a crash finds the file and does
// not send again, like a gateway that deduplicates by key.
type SMSHandler struct {
	Dir string
	Log *zap.Logger
}

// ProcessTask implements asynq.Handler.
func (h SMSHandler) ProcessTask(ctx context.Context, t *asynq.Task) error {
	return onceq.Handle(SMSes, h.send).ProcessTask(ctx, t)
}

func (h SMSHandler) send(ctx context.Context, m SMS) (SMSResult, error) {
	key := downstream(ctx)
	sum := sha256.Sum256([]byte(key))
	res := SMSResult{MessageID: hex.EncodeToString(sum[:16]), To: m.To}
	res.File = filepath.Join(h.Dir, res.MessageID+".json")
	if err := os.MkdirAll(h.Dir, 0o750); err != nil {
		return SMSResult{}, err
	}
	b, _ := json.Marshal(struct {
		Key string `json:"key"`
		SMS
	}{key, m})
	f, err := os.OpenFile(res.File, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
	if errors.Is(err, fs.ErrExist) {
		logger(h.Log).Debug("sms already in the outbox", zap.String("key", key))
		return res, nil
	}
	if err != nil {
		return SMSResult{}, err
	}
	if _, err = f.Write(append(b, '\n')); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(res.File) // a half-written message must not count as sent
		return SMSResult{}, err
	}
	logger(h.Log).Debug("sms written", zap.String("key", key), zap.String("file", res.File))
	return res, nil
}
