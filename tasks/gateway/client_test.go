package gateway

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/tasks"
)

func validPayment() tasks.Payment {
	return tasks.Payment{PaymentID: "pay_1", Account: "acct_42", Amount: 500, Currency: "EUR", Description: "order 7"}
}

func testServer(t *testing.T, token string) (*Server, *httptest.Server) {
	t.Helper()
	gw := &Server{Token: token}
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)
	return gw, srv
}

func TestClientReplaysSameKey(t *testing.T) {
	t.Parallel()
	gw, srv := testServer(t, "tok")
	g := &Client{URL: srv.URL + "/", Token: "tok"}
	ctx := context.Background()
	first, err := g.Charge(ctx, "k1", validPayment())
	if err != nil {
		t.Fatal(err)
	}
	second, err := g.Charge(ctx, "k1", validPayment())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(first.ChargeID, "ch_") || first != (tasks.Charge{ChargeID: first.ChargeID, Status: "succeeded", Amount: 500, Currency: "EUR"}) {
		t.Errorf("first charge = %+v", first)
	}
	if !second.Replayed || second.ChargeID != first.ChargeID {
		t.Errorf("second charge = %+v; want the first replayed", second)
	}
	if gw.Charges("k1") != 1 || gw.Total() != 1 {
		t.Errorf("the gateway made %d charges for k1, %d in all; want 1, 1", gw.Charges("k1"), gw.Total())
	}
	if _, err := g.Charge(ctx, "k2", validPayment()); err != nil || gw.Total() != 2 || gw.Charges("k2") != 1 {
		t.Errorf("a new key: err %v, total %d; want a second charge", err, gw.Total())
	}
}

func TestClientConcurrentSameKey(t *testing.T) {
	t.Parallel()
	gw, srv := testServer(t, "")
	g := &Client{URL: srv.URL}
	var wg sync.WaitGroup
	ids := make(chan string, 20)
	for range 20 {
		wg.Go(func() {
			c, err := g.Charge(context.Background(), "same", validPayment())
			if err != nil {
				t.Error(err)
				return
			}
			ids <- c.ChargeID
		})
	}
	wg.Wait()
	close(ids)
	seen := map[string]bool{}
	for id := range ids {
		seen[id] = true
	}
	if len(seen) != 1 || gw.Total() != 1 {
		t.Fatalf("20 concurrent requests with one key made %d charge ids, %d charges; want 1", len(seen), gw.Total())
	}
}

func TestClientErrors(t *testing.T) {
	t.Parallel()
	gw, srv := testServer(t, "tok")
	ctx := context.Background()
	if _, err := (&Client{URL: srv.URL, Token: "tok"}).Charge(ctx, "k", validPayment()); err != nil {
		t.Fatal(err)
	}
	status := func(code int, body string) string {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(code)
			w.Write([]byte(body))
		}))
		t.Cleanup(s.Close)
		return s.URL
	}
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	other := validPayment()
	other.Amount = 999

	tests := []struct {
		name    string
		client  *Client
		payment tasks.Payment
		status  int // 0: no Error
		skip    bool
		detail  string
	}{
		{"same key, other body", &Client{URL: srv.URL, Token: "tok"}, other, 422, true, "another request body"},
		{"wrong token", &Client{URL: srv.URL, Token: "nope"}, validPayment(), 401, true, "bearer token"},
		{"no token", &Client{URL: srv.URL}, validPayment(), 401, true, "bearer token"},
		{"server error", &Client{URL: status(500, `{"detail":"db down"}`)}, validPayment(), 500, false, "db down"},
		{"bad gateway", &Client{URL: status(502, `upstream`)}, validPayment(), 502, false, "upstream"},
		{"in flight", &Client{URL: status(409, `{"title":"Conflict"}`)}, validPayment(), 409, false, "Conflict"},
		{"rate limited", &Client{URL: status(429, ``)}, validPayment(), 429, false, ""},
		{"bad request", &Client{URL: status(400, `{"detail":"no"}`)}, validPayment(), 400, true, "no"},
		{"2xx without a charge", &Client{URL: status(200, `{}`)}, validPayment(), 0, false, "not a charge"},
		{"huge response", &Client{URL: status(200, strings.Repeat(" ", maxResponse+1))}, validPayment(), 0, false, "over"},
		{"network error", &Client{URL: down.URL}, validPayment(), 0, false, "refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := tt.client.Charge(ctx, "k", tt.payment)
			if err == nil {
				t.Fatal("Charge succeeded, want an error")
			}
			if errors.Is(err, asynq.SkipRetry) != tt.skip {
				t.Errorf("SkipRetry = %v, want %v (err: %v)", !tt.skip, tt.skip, err)
			}
			var gerr *Error
			if got := errors.As(err, &gerr); got != (tt.status != 0) || (got && gerr.StatusCode != tt.status) {
				t.Errorf("Error = %v, want status %d", gerr, tt.status)
			}
			if !strings.Contains(err.Error(), tt.detail) {
				t.Errorf("error %q does not carry %q", err, tt.detail)
			}
		})
	}
	if gw.Total() != 1 {
		t.Errorf("the gateway made %d charges, want 1", gw.Total())
	}
}

func TestClientNeedsKeyAndURL(t *testing.T) {
	t.Parallel()
	_, srv := testServer(t, "")
	if _, err := (&Client{URL: srv.URL}).Charge(context.Background(), "", validPayment()); !errors.Is(err, dedup.ErrInvalid) {
		t.Errorf("Charge without a key = %v, want dedup.ErrInvalid", err)
	}
	if _, err := (&Client{}).Charge(context.Background(), "k", validPayment()); err == nil {
		t.Errorf("Charge without a URL succeeded")
	}
}

// A gateway answering as Stripe does, {"id": ...}, is charged once: before
// this was accepted, such an answer was retried ten times and archived while
// the money had moved.
func TestClientSuccessBodies(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		code int
		body string
		want tasks.Charge
	}{
		{"stripe-like id", 200, `{"id":"ch_1","status":"succeeded"}`, tasks.Charge{ChargeID: "ch_1", Status: "succeeded"}},
		{"charge_id", 201, `{"charge_id":"ch_2","status":"succeeded","amount":500,"currency":"EUR"}`,
			tasks.Charge{ChargeID: "ch_2", Status: "succeeded", Amount: 500, Currency: "EUR"}},
		{"id wins over charge_id", 200, `{"id":"a","charge_id":"b"}`, tasks.Charge{ChargeID: "a"}},
		{"numeric id", 200, `{"id":12345}`, tasks.Charge{ChargeID: "12345"}},
		{"amount as a string is ignored", 202, `{"id":"ch_3","amount":"5.00","extra":{"x":1}}`, tasks.Charge{ChargeID: "ch_3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var posts atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				posts.Add(1)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tt.code)
				w.Write([]byte(tt.body))
			}))
			t.Cleanup(srv.Close)
			c, err := (&Client{URL: srv.URL}).Charge(context.Background(), "k", validPayment())
			if err != nil || c != tt.want || posts.Load() != 1 {
				t.Fatalf("Charge = %+v, %v after %d POSTs; want %+v, nil after 1", c, err, posts.Load(), tt.want)
			}
		})
	}
	for _, body := range []string{`{}`, `{"status":"succeeded"}`, `{"id":""}`, `[{"id":"x"}]`, `{"id":null}`} {
		if _, ok := decodeCharge([]byte(body)); ok {
			t.Errorf("decodeCharge(%s) counted as a charge", body)
		}
	}
}
