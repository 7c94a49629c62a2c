package peertest

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"testing"
)

// StripeRequest is one request a StripePeer received.
type StripeRequest struct {
	Method, Path   string
	IdempotencyKey string
	Authorization  bool // a bearer key was sent
	Form           url.Values
	Status         int // what the peer answered
}

// StripePeer is a loopback proxy in front of stripe-mock that records every
// request (with its Idempotency-Key) and deduplicates nothing, so counting
// its POSTs counts what the client sent. It answers Stripe's decline test
// PaymentMethods with Stripe's 402 card_error, which stripe-mock cannot
// produce, and can fail the next requests on demand.
type StripePeer struct {
	URL string

	mu    sync.Mutex
	reqs  []StripeRequest
	fails []failure
}

type failure struct {
	status int
	body   string
}

// declines are Stripe's documented decline test PaymentMethods, with the
// error Stripe answers for each.
var declines = map[string]struct{ code, decline, msg string }{
	"pm_card_chargeDeclined":                       {"card_declined", "generic_decline", "Your card was declined."},
	"pm_card_visa_chargeDeclined":                  {"card_declined", "generic_decline", "Your card was declined."},
	"pm_card_visa_chargeDeclinedInsufficientFunds": {"card_declined", "insufficient_funds", "Your card has insufficient funds."},
	"pm_card_chargeDeclinedExpiredCard":            {"expired_card", "expired_card", "Your card has expired."},
}

// NewStripePeer starts a peer in front of the stripe-mock at upstream,
// closed when the test ends.
func NewStripePeer(t testing.TB, upstream string) *StripePeer {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatalf("peertest: stripe upstream %q: %v", upstream, err)
	}
	p := &StripePeer{}
	proxy := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		form, _ := url.ParseQuery(string(body))
		rec := &recorder{ResponseWriter: w, status: http.StatusOK}
		p.serve(rec, r, form, proxy)
		p.mu.Lock()
		p.reqs = append(p.reqs, StripeRequest{Method: r.Method, Path: r.URL.Path,
			IdempotencyKey: r.Header.Get("Idempotency-Key"), Authorization: r.Header.Get("Authorization") != "",
			Form: form, Status: rec.status})
		p.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	p.URL = srv.URL
	return p
}

func (p *StripePeer) serve(w http.ResponseWriter, r *http.Request, form url.Values, proxy http.Handler) {
	p.mu.Lock()
	var f *failure
	if len(p.fails) > 0 {
		f = &p.fails[0]
		p.fails = p.fails[1:]
	}
	p.mu.Unlock()
	if f != nil {
		writeJSON(w, f.status, f.body)
		return
	}
	if d, ok := declines[form.Get("payment_method")]; ok && r.Method == http.MethodPost && r.URL.Path == "/v1/payment_intents" {
		// As Stripe does: the PaymentIntent exists, its confirmation failed.
		amount, _ := strconv.ParseInt(form.Get("amount"), 10, 64)
		pi := map[string]any{"id": "pi_declined_" + form.Get("metadata[onceq_payment_id]"), "object": "payment_intent",
			"status": "requires_payment_method", "amount": amount, "currency": form.Get("currency")}
		b, _ := json.Marshal(map[string]any{"error": map[string]any{
			"type": "card_error", "code": d.code, "decline_code": d.decline, "message": d.msg,
			"doc_url": "https://stripe.com/docs/error-codes/" + d.code, "payment_intent": pi,
		}})
		writeJSON(w, http.StatusPaymentRequired, string(b))
		return
	}
	proxy.ServeHTTP(w, r)
}

// FailNext answers the next request, whatever it is, with status and a
// JSON body (e.g. Stripe's error object) instead of forwarding it.
func (p *StripePeer) FailNext(status int, body string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fails = append(p.fails, failure{status, body})
}

// Requests lists what the peer received, in order.
func (p *StripePeer) Requests() []StripeRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]StripeRequest(nil), p.reqs...)
}

// Posts is how many POSTs to path carried Idempotency-Key key.
func (p *StripePeer) Posts(path, key string) int {
	n := 0
	for _, r := range p.Requests() {
		if r.Method == http.MethodPost && r.Path == path && r.IdempotencyKey == key {
			n++
		}
	}
	return n
}

func writeJSON(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Request-Id", "req_peertest")
	w.WriteHeader(status)
	io.WriteString(w, body)
}

type recorder struct {
	http.ResponseWriter
	status int
}

func (r *recorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}
