// Package stripe charges onceq payments through Stripe's API with the
// official client (github.com/stripe/stripe-go): one confirmed PaymentIntent
// per onceq downstream key (the idempotency key and its incarnation), sent
// as Stripe's Idempotency-Key, so a redelivered task gets the first
// PaymentIntent back instead of a second one, and the next incarnation of a
// payment that failed for good asks again instead of replaying the decline.
//
// Stripe's error classes map onto onceq's: card and invalid-request errors
// are refusals that no retry changes (the task is archived, its record says
// failed with Stripe's code); rate limits, API-connection errors and 5xx
// answers return plain errors, so asynq retries under the same key.
package stripe

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	stripego "github.com/stripe/stripe-go/v84"
	"go.uber.org/zap"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/tasks"
)

// DefaultURL is Stripe's API base URL.
const DefaultURL = "https://api.stripe.com"

// maxKeyLen is the longest Idempotency-Key Stripe accepts.
const maxKeyLen = 255

// Metadata keys set on every PaymentIntent, for reconciliation in Stripe's
// dashboard and webhooks.
const (
	MetaPaymentID = "onceq_payment_id"
	MetaKey       = "onceq_key"
)

// Options configure a Gateway.
type Options struct {
	// Key is the secret (sk_...) or restricted (rk_...) API key. Required.
	Key string
	// URL is the API base URL, e.g. a stripe-mock for tests.
	// Default: https://api.stripe.com.
	URL string
	// HTTP is the client to use. Default: one with a 30s timeout.
	HTTP *http.Client
	// Log receives stripe-go's warnings and errors. Default: none.
	Log *zap.Logger
}

// Gateway is the tasks.Gateway on Stripe. Safe for concurrent use.
type Gateway struct {
	client *stripego.Client
}

var _ tasks.Gateway = (*Gateway)(nil)

// New returns a Gateway for o.
func New(o Options) (*Gateway, error) {
	if o.Key == "" {
		return nil, errors.New("stripe: no API key")
	}
	if o.URL == "" {
		o.URL = DefaultURL
	}
	if o.HTTP == nil {
		o.HTTP = &http.Client{Timeout: 30 * time.Second}
	}
	log := o.Log
	if log == nil {
		log = zap.NewNop()
	}
	backend := stripego.GetBackendWithConfig(stripego.APIBackend, &stripego.BackendConfig{
		URL:        stripego.String(strings.TrimRight(o.URL, "/")),
		HTTPClient: o.HTTP,
		// asynq retries under the same key, with its back-off and its record
		// of attempts; stripe-go's own retries would sleep in a worker slot.
		MaxNetworkRetries: stripego.Int64(0),
		LeveledLogger:     log.WithOptions(zap.IncreaseLevel(zap.WarnLevel)).Sugar(),
	})
	return &Gateway{client: stripego.NewClient(o.Key, stripego.WithBackends(&stripego.Backends{
		API: backend, Connect: backend, Uploads: backend, MeterEvents: backend,
	}))}, nil
}

// Charge creates and confirms one PaymentIntent for p under key: amount and
// currency from p, p.Account as the PaymentMethod to charge (pm_..., or a
// test PaymentMethod such as pm_card_visa), payment id and key in metadata.
// The Charge is the PaymentIntent's id and status as Stripe answered; a
// status other than "succeeded" (processing, requires_action) is recorded
// as is, since retrying cannot change it.
func (g *Gateway) Charge(ctx context.Context, key string, p tasks.Payment) (tasks.Charge, error) {
	if key == "" {
		return tasks.Charge{}, fmt.Errorf("stripe: %w: empty idempotency key", dedup.ErrInvalid)
	}
	params := &stripego.PaymentIntentCreateParams{
		Amount:        stripego.Int64(p.Amount),
		Currency:      stripego.String(strings.ToLower(p.Currency)),
		PaymentMethod: stripego.String(p.Account),
		Confirm:       stripego.Bool(true),
		// A worker cannot send a customer to a bank's page and back.
		AutomaticPaymentMethods: &stripego.PaymentIntentCreateAutomaticPaymentMethodsParams{
			Enabled:        stripego.Bool(true),
			AllowRedirects: stripego.String("never"),
		},
	}
	if p.Description != "" {
		params.Description = stripego.String(p.Description)
	}
	params.AddMetadata(MetaPaymentID, p.PaymentID)
	params.AddMetadata(MetaKey, key)
	params.SetIdempotencyKey(IdempotencyKey(key))
	pi, err := g.client.V1PaymentIntents.Create(ctx, params)
	if err != nil {
		return tasks.Charge{}, classify(err)
	}
	c := tasks.Charge{ChargeID: pi.ID, Status: string(pi.Status), Amount: pi.Amount, Currency: strings.ToUpper(string(pi.Currency))}
	if pi.LastResponse != nil {
		c.Replayed = pi.LastResponse.Header.Get("Idempotent-Replayed") == "true"
	}
	return c, nil
}

// IdempotencyKey is the Idempotency-Key Stripe gets for a onceq key: the key
// itself, or, past Stripe's 255 characters, a hash of it (still one per key).
func IdempotencyKey(key string) string {
	if len(key) <= maxKeyLen {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return "onceq-sha256-" + hex.EncodeToString(sum[:])
}

// Error is what Stripe answered when it did not create the PaymentIntent,
// with Stripe's own codes.
type Error struct {
	Status        int    // HTTP status: 402 for a card error
	Type          string // card_error, invalid_request_error, idempotency_error, api_error
	Code          string // e.g. card_declined, rate_limit, parameter_missing
	DeclineCode   string // the issuer's reason, for card errors
	Message       string
	PaymentIntent string // the PaymentIntent a card error left behind, if any
	RequestID     string
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "stripe: %d %s", e.Status, e.Type)
	if e.Code != "" {
		b.WriteString(" " + e.Code)
	}
	if e.DeclineCode != "" {
		b.WriteString(" (" + e.DeclineCode + ")")
	}
	if e.Message != "" {
		b.WriteString(": " + e.Message)
	}
	if e.PaymentIntent != "" {
		b.WriteString(" [payment_intent " + e.PaymentIntent + "]")
	}
	if e.RequestID != "" {
		b.WriteString(" [request " + e.RequestID + "]")
	}
	return b.String()
}

// Retryable reports whether the same request may succeed later: rate limits
// and lock timeouts (429), the first request with the key still in flight
// (409 idempotency_key_in_use), and Stripe's own failures (5xx, api_error).
// Card errors, invalid requests (including a bad API key) and an
// Idempotency-Key reused with other parameters are final.
func (e *Error) Retryable() bool {
	switch {
	case e.Status == http.StatusTooManyRequests, e.Status >= 500:
		return true
	case e.Type == string(stripego.ErrorTypeAPI):
		return true
	case e.Code == string(stripego.ErrorCodeIdempotencyKeyInUse):
		return true
	}
	return false
}

// classify turns stripe-go's error into an *Error, wrapped with
// asynq.SkipRetry when final. Errors without a Stripe answer (connection
// refused, timeouts, an unreadable body) stay plain: retried with the key.
func classify(err error) error {
	var se *stripego.Error
	if !errors.As(err, &se) {
		return fmt.Errorf("stripe: %w", err)
	}
	e := &Error{Status: se.HTTPStatusCode, Type: string(se.Type), Code: string(se.Code),
		DeclineCode: string(se.DeclineCode), Message: se.Msg, RequestID: se.RequestID}
	if se.PaymentIntent != nil {
		e.PaymentIntent = se.PaymentIntent.ID
	}
	if e.Retryable() {
		return e
	}
	return fmt.Errorf("%w: %w", e, asynq.SkipRetry)
}
