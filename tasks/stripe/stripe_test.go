package stripe

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/peertest"
	"github.com/onceq/onceq/internal/testenv"
	"github.com/onceq/onceq/tasks"
)

func payment(method string) tasks.Payment {
	return tasks.Payment{PaymentID: "pay_1", Account: method, Amount: 4200, Currency: "EUR", Description: "order 7"}
}

func newGateway(t *testing.T, url string) *Gateway {
	t.Helper()
	g, err := New(Options{Key: peertest.StripeMockKey, URL: url})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// One confirmed PaymentIntent per call, created by stripe-go at stripe-mock
// with the onceq key as Idempotency-Key and the payment in the parameters.
func TestChargeAgainstStripeMock(t *testing.T) {
	t.Parallel()
	peer := peertest.NewStripePeer(t, peertest.StripeMock(t))
	g := newGateway(t, peer.URL)
	const key = "payment:charge/pay_1"

	c, err := g.Charge(context.Background(), key, payment("pm_card_visa"))
	if err != nil {
		t.Fatalf("Charge: %v", err)
	}
	// stripe-mock answers with its fixture's status, reflecting the amount
	// and currency it was sent.
	if !strings.HasPrefix(c.ChargeID, "pi_") || c.Status == "" || c.Amount != 4200 || c.Currency != "EUR" {
		t.Errorf("Charge = %+v; want a pi_ id, a status, 4200 EUR", c)
	}
	reqs := peer.Requests()
	if len(reqs) != 1 {
		t.Fatalf("peer got %d requests, want 1: %+v", len(reqs), reqs)
	}
	r := reqs[0]
	want := map[string]string{
		"amount": "4200", "currency": "eur", "confirm": "true", "payment_method": "pm_card_visa",
		"description": "order 7", "metadata[onceq_payment_id]": "pay_1", "metadata[onceq_key]": key,
		"automatic_payment_methods[allow_redirects]": "never",
	}
	for k, v := range want {
		if got := r.Form.Get(k); got != v {
			t.Errorf("form %s = %q, want %q", k, got, v)
		}
	}
	if r.Method != http.MethodPost || r.Path != "/v1/payment_intents" || r.IdempotencyKey != key || !r.Authorization || r.Status != 200 {
		t.Errorf("request %s %s key %q auth %v status %d; want POST /v1/payment_intents with key %q, a bearer key, 200",
			r.Method, r.Path, r.IdempotencyKey, r.Authorization, r.Status, key)
	}
}

// Stripe's decline is final: the error wraps SkipRetry and carries Stripe's
// codes, so the record and the archived task say why.
func TestDeclineIsPermanent(t *testing.T) {
	t.Parallel()
	peer := peertest.NewStripePeer(t, peertest.StripeMock(t))
	g := newGateway(t, peer.URL)
	_, err := g.Charge(context.Background(), "payment:charge/pay_1", payment("pm_card_visa_chargeDeclinedInsufficientFunds"))
	var se *Error
	if !errors.Is(err, asynq.SkipRetry) || !errors.As(err, &se) {
		t.Fatalf("Charge = %v; want a *stripe.Error wrapping SkipRetry", err)
	}
	if se.Status != 402 || se.Type != "card_error" || se.Code != "card_declined" || se.DeclineCode != "insufficient_funds" ||
		se.PaymentIntent != "pi_declined_pay_1" {
		t.Errorf("error = %+v", se)
	}
	for _, s := range []string{"402", "card_error", "card_declined", "insufficient_funds", "pi_declined_pay_1"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}
}

// Stripe's error classes, as stripe-go parses them from Stripe's JSON,
// onto retry or SkipRetry.
func TestErrorClasses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		status int
		body   string
		retry  bool
		code   string
	}{
		{"card error", 402, `{"error":{"type":"card_error","code":"expired_card","message":"Your card has expired."}}`, false, "expired_card"},
		{"invalid request", 400, `{"error":{"type":"invalid_request_error","code":"parameter_missing","param":"amount"}}`, false, "parameter_missing"},
		{"bad API key", 401, `{"error":{"type":"invalid_request_error","message":"Invalid API Key provided"}}`, false, "Invalid API Key"},
		{"key reused with other parameters", 400, `{"error":{"type":"idempotency_error","message":"Keys for idempotent requests can only be used with the same parameters"}}`, false, "idempotency_error"},
		{"rate limit", 429, `{"error":{"type":"invalid_request_error","code":"rate_limit","message":"Too many requests"}}`, true, "rate_limit"},
		{"lock timeout", 429, `{"error":{"type":"invalid_request_error","code":"lock_timeout"}}`, true, "lock_timeout"},
		{"first request in flight", 409, `{"error":{"type":"invalid_request_error","code":"idempotency_key_in_use"}}`, true, "idempotency_key_in_use"},
		{"api error", 500, `{"error":{"type":"api_error","message":"Something went wrong on Stripe's end."}}`, true, "api_error"},
		{"bad gateway, no JSON", 502, `<html>bad gateway</html>`, true, "502"},
	}
	peer := peertest.NewStripePeer(t, "http://127.0.0.1:1") // every request is answered by FailNext
	g := newGateway(t, peer.URL)
	for _, tt := range tests {
		peer.FailNext(tt.status, tt.body)
		_, err := g.Charge(context.Background(), "payment:charge/pay_1", payment("pm_card_visa"))
		if err == nil {
			t.Errorf("%s: Charge succeeded", tt.name)
			continue
		}
		if errors.Is(err, asynq.SkipRetry) == tt.retry {
			t.Errorf("%s: SkipRetry = %v, want %v (err: %v)", tt.name, !tt.retry, !tt.retry, err)
		}
		if !strings.Contains(err.Error(), tt.code) {
			t.Errorf("%s: error %q does not say %q", tt.name, err, tt.code)
		}
	}
	if n := len(peer.Requests()); n != len(tests) {
		t.Errorf("peer got %d requests, want %d: stripe-go retried on its own", n, len(tests))
	}
}

// No Stripe at all: retried by asynq, not archived.
func TestConnectionErrorIsRetried(t *testing.T) {
	t.Parallel()
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	_, err := newGateway(t, down.URL).Charge(context.Background(), "payment:charge/pay_1", payment("pm_card_visa"))
	var se *Error
	if err == nil || errors.Is(err, asynq.SkipRetry) || errors.As(err, &se) {
		t.Fatalf("Charge = %v; want a plain, retryable error", err)
	}
}

func TestIdempotencyKeyFitsStripe(t *testing.T) {
	t.Parallel()
	short := "payment:charge/pay_1"
	if IdempotencyKey(short) != short {
		t.Errorf("a short key was changed")
	}
	long := "payment:charge/" + strings.Repeat("x", 255)
	a, b := IdempotencyKey(long), IdempotencyKey(long+"y")
	if len(a) > maxKeyLen || a == b || a != IdempotencyKey(long) {
		t.Errorf("long keys map to %q and %q; want stable, distinct, at most %d bytes", a, b, maxKeyLen)
	}
}

func TestNewNeedsAKey(t *testing.T) {
	t.Parallel()
	if _, err := New(Options{}); err == nil {
		t.Fatal("New without a key succeeded")
	}
	g := newGateway(t, "http://127.0.0.1:1")
	if _, err := g.Charge(context.Background(), "", payment("pm_card_visa")); !errors.Is(err, dedup.ErrInvalid) {
		t.Errorf("Charge without a key = %v, want ErrInvalid", err)
	}
}

// The payment handler sends Stripe the downstream key: the next incarnation
// of a payment that failed for good is a new PaymentIntent (key#2), not
// Stripe's replay of the decline.
func TestHandlerSendsIncarnationKey(t *testing.T) {
	t.Parallel()
	peer := peertest.NewStripePeer(t, peertest.StripeMock(t))
	h := tasks.PaymentHandler{Gateway: newGateway(t, peer.URL)}
	j, err := testenv.Job(tasks.Payments.Job(payment("pm_card_visa")))
	if err != nil {
		t.Fatal(err)
	}
	hdr := map[string]string{"onceq-inc": "2"} // the second incarnation, as the Producer marks it
	maps.Copy(hdr, j.Task.Headers())
	if err := h.ProcessTask(context.Background(), asynq.NewTaskWithHeaders(j.Task.Type(), j.Task.Payload(), hdr)); err != nil {
		t.Fatal(err)
	}
	reqs := peer.Requests()
	const want = "payment:charge/pay_1#2"
	if len(reqs) != 1 || reqs[0].IdempotencyKey != want || reqs[0].Form.Get("metadata[onceq_key]") != want {
		t.Fatalf("requests %+v; want one with Idempotency-Key and onceq_key %q", reqs, want)
	}
}
