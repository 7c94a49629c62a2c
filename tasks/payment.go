package tasks

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/hibiken/asynq"
	"go.uber.org/zap"

	"github.com/onceq/onceq/dedup"
)

// TypePayment charges an account through the payment gateway.
const TypePayment = "payment:charge"

const (
	// MaxAmount is the largest charge in minor units (10 billion in a
	// two-decimal currency): beyond it a typo is likelier than a sale.
	MaxAmount = 1_000_000_000_000
	// PaymentRateWindow throttles a repeat of the same account, currency and
	// amount under another payment id: the classic double-submit.
	PaymentRateWindow = 60 * time.Second
	// PaymentMaxRetry is the asynq MaxRetry of payments.
	PaymentMaxRetry = 10

	maxAccountBytes     = 255
	maxDescriptionBytes = 1024
)

var currencyRE = regexp.MustCompile(`^[A-Z]{3}$`)

// Payment is the payload of TypePayment. Amount is in integer minor units
// (cents): floats cannot hold money exactly.
type Payment struct {
	PaymentID   string `json:"payment_id"`
	Account     string `json:"account"`
	Amount      int64  `json:"amount"`
	Currency    string `json:"currency"` // ISO 4217, e.g. "EUR"
	Description string `json:"description,omitempty"`
}

func (p Payment) validate() error {
	fail := func(format string, a ...any) error {
		return fmt.Errorf("tasks: %s: %w: "+format, append([]any{TypePayment, ErrInvalid}, a...)...)
	}
	if _, err := dedup.NewKey(TypePayment, p.PaymentID); err != nil {
		return fail("payment_id: %v", err)
	}
	switch {
	case p.Account == "":
		return fail("account is empty")
	case len(p.Account) > maxAccountBytes:
		return fail("account longer than %d bytes", maxAccountBytes)
	case !printable(p.Account):
		return fail("account %q is not printable UTF-8", p.Account)
	case p.Amount <= 0 || p.Amount > MaxAmount:
		return fail("amount %d not in 1..%d", p.Amount, int64(MaxAmount))
	case !currencyRE.MatchString(p.Currency):
		return fail("currency %q is not three uppercase letters", p.Currency)
	case len(p.Description) > maxDescriptionBytes:
		return fail("description longer than %d bytes", maxDescriptionBytes)
	case !utf8.ValidString(p.Description):
		return fail("description is not valid UTF-8")
	}
	return nil
}

func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// NewPayment validates p and returns its Job on the "critical" queue: keyed
// by PaymentID, refused again for DefaultUniqueWindow, and throttled for
// PaymentRateWindow when the same account is charged the same amount.
func NewPayment(p Payment) (Job, error) {
	if err := p.validate(); err != nil {
		return Job{}, err
	}
	j, err := newJob(TypePayment, p, p.PaymentID, QueueCritical)
	if err != nil {
		return Job{}, err
	}
	rate, err := paymentRateKey(p)
	if err != nil {
		return Job{}, err
	}
	j.Rate = &Rule{Key: rate, Window: PaymentRateWindow}
	j.MaxRetry = PaymentMaxRetry
	return j, nil
}

func paymentRateKey(p Payment) (dedup.Key, error) {
	suffix := ":" + p.Currency + ":" + strconv.FormatInt(p.Amount, 10)
	if k, err := dedup.NewKey("payment:rate", p.Account+suffix); err == nil {
		return k, nil
	}
	// Accounts with spaces or braces are valid; hash them into a key.
	sum := sha256.Sum256([]byte(p.Account))
	k, err := dedup.NewKey("payment:rate", "sha256-"+hex.EncodeToString(sum[:])+suffix)
	if err != nil {
		return dedup.Key{}, fmt.Errorf("tasks: new %s: %w: rate key: %w", TypePayment, ErrInvalid, err)
	}
	return k, nil
}

// PaymentHandler charges TypePayment tasks through Gateway, passing the
// idempotency key as the gateway's Idempotency-Key: a redelivered task gets
// the original charge back instead of a second one.
type PaymentHandler struct {
	Gateway Gateway
	Log     *zap.Logger
}

// ProcessTask implements asynq.Handler.
func (h PaymentHandler) ProcessTask(ctx context.Context, t *asynq.Task) error {
	return withResult(ctx, t, h.process)
}

func (h PaymentHandler) process(ctx context.Context, t *asynq.Task) (Charge, error) {
	var p Payment
	if err := decodePayload(t, &p); err != nil {
		return Charge{}, err
	}
	if err := p.validate(); err != nil {
		return Charge{}, permanent(err)
	}
	key, err := taskKey(ctx, t, p.PaymentID, nil)
	if err != nil {
		return Charge{}, err
	}
	if h.Gateway == nil {
		return Charge{}, errors.New("tasks: payment handler has no Gateway")
	}
	c, err := h.Gateway.Charge(ctx, key.String(), p)
	if err != nil {
		return Charge{}, err
	}
	logger(h.Log).Debug("payment charged", zap.String("key", key.String()),
		zap.String("charge_id", c.ChargeID), zap.Bool("replayed", c.Replayed))
	return c, nil
}
