package tasks

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
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

// Validate reports why p cannot be charged, wrapping dedup.ErrInvalid; the
// built-in gateway (tasks/gateway) refuses the same payments.
func (p Payment) Validate() error {
	fail := func(format string, a ...any) error {
		return fmt.Errorf("tasks: %s: %w: "+format, append([]any{TypePayment, dedup.ErrInvalid}, a...)...)
	}
	// An id onceq would hash (it starts with "~", where hashed ids live)
	// would not be the payment's key as it stands.
	if _, err := dedup.NewKey(TypePayment, p.PaymentID); err != nil || strings.HasPrefix(p.PaymentID, "~") {
		return fail("payment_id %q: printable, at most 255 bytes, no spaces or braces, not starting with \"~\"", p.PaymentID)
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

// paymentSpec is the payment:charge declaration: on the "critical" queue,
// keyed by payment_id, refused again for the payment id window, and
// throttled for the payment rate window when the same account is charged
// the same amount under another id.
func paymentSpec(w Windows) dedup.Spec[Payment] {
	return dedup.Spec[Payment]{
		// Key: payment_id (required; one payment whoever sends it, unless
		// ids are per client); rate rule: account + currency + amount, per client.
		Type:  TypePayment,
		Queue: QueueCritical,
		ID:    func(p Payment) string { return p.PaymentID },
		// A payment id names one charge: a second client sending it must
		// meet the first one's job, not charge again. Between tenants it
		// is each one's own.
		Global:   !w.PaymentIDsPerClient,
		Validate: Payment.Validate,
		Unique:   w.PaymentID,
		Rules: func(p Payment) ([]*dedup.Rule, error) {
			return []*dedup.Rule{{Key: paymentRateKey(p), Window: w.PaymentRate}}, nil
		},
		MaxRetry:    PaymentMaxRetry,
		WriteResult: true,
	}
}

func paymentHandler(d Deps) asynq.Handler {
	return PaymentHandler{Gateway: d.Gateway, Log: d.Log}
}

// paymentRateKey is the rate rule's key: account, currency and amount
// (onceq hashes an account with spaces or braces into its own space).
func paymentRateKey(p Payment) dedup.Key {
	return dedup.Key{Namespace: "payment:rate", ID: p.Account + ":" + p.Currency + ":" + strconv.FormatInt(p.Amount, 10)}
}

// Gateway is the payment port: it charges p once per idempotency key, so a
// redelivered task gets the original charge back instead of a second one.
// Errors wrapping asynq.SkipRetry are refusals that no retry can change;
// any other error is retried by asynq under the same key. The adapters are
// in tasks/gateway (the generic HTTP protocol) and tasks/stripe.
type Gateway interface {
	Charge(ctx context.Context, key string, p Payment) (Charge, error)
}

// Charge is a gateway's answer to a charge request, and the result onceq
// stores for the payment.
type Charge struct {
	// ChargeID is the gateway's id of the charge: "ch_..." from a generic
	// gateway, the PaymentIntent "pi_..." from Stripe.
	ChargeID string `json:"id"`
	// Status is the gateway's word for the charge ("succeeded", or a Stripe
	// PaymentIntent status such as "processing" or "requires_action").
	Status   string `json:"status"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	// Replayed: the gateway answered from its idempotency store
	// (Idempotent-Replayed: true); no new charge was made.
	Replayed bool `json:"-"`
}

// PaymentHandler charges TypePayment tasks through Gateway, passing the
// downstream key (the idempotency key and its incarnation) as the gateway's
// Idempotency-Key: a redelivered task gets the original charge back instead
// of a second one, and the next incarnation of a payment that failed for
// good is a new request, not a replay of the decline.
type PaymentHandler struct {
	Gateway Gateway
	Log     *zap.Logger
}

// ProcessTask implements asynq.Handler.
func (h PaymentHandler) ProcessTask(ctx context.Context, t *asynq.Task) error {
	return dedup.Handle(Payments, h.charge).ProcessTask(ctx, t)
}

func (h PaymentHandler) charge(ctx context.Context, p Payment) (Charge, error) {
	key := downstream(ctx)
	if h.Gateway == nil {
		return Charge{}, errors.New("tasks: payment handler has no Gateway")
	}
	c, err := h.Gateway.Charge(ctx, key, p)
	if err != nil {
		return Charge{}, err
	}
	logger(h.Log).Debug("payment charged", zap.String("key", key),
		zap.String("charge_id", c.ChargeID), zap.Bool("replayed", c.Replayed))
	return c, nil
}
