package api_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/internal/api"
	"github.com/onceq/onceq/internal/testenv"
)

// Redis gone: every route answers a 503 problem with Retry-After, and the
// client gets an answer rather than a hang.
func TestRedisDownIs503(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, DialTimeout: 200 * time.Millisecond,
		ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond, MaxRetries: 1})
	t.Cleanup(func() { rdb.Close() })
	e := newEnvOn(t, rdb, func(o *api.Options) { o.Timeout = 2 * time.Second })
	accepted(t, e.post(paymentPath, paymentBody("pmt-up", "acct-1", 100), ""), http.StatusAccepted)
	srv.Stop()

	for _, c := range []struct {
		name string
		r    req
	}{
		{"payment", req{path: paymentPath, body: paymentBody("pmt-down", "acct-2", 100)}},
		{"payment with key", req{path: paymentPath, body: paymentBody("pmt-down", "acct-2", 100),
			header: map[string]string{"Idempotency-Key": "k-down"}}},
		{"email", req{path: emailPath, body: `{"to":"a@example.com","subject":"s","body":"b"}`}},
		{"webhook", req{path: "/v1/webhooks/" + source, body: eventBody("evt_down", 1), header: map[string]string{
			"Authorization": "", "Idempotency-Key": "k-down",
			api.SignatureHeader: testenv.Sign(secret, e.clock(), []byte(eventBody("evt_down", 1)))}}},
		{"job", req{method: http.MethodGet, path: "/v1/jobs/payment:charge%2Fpmt-up"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := e.doT(t, c.r)
			p := problem(t, r, http.StatusServiceUnavailable)
			if r.Header.Get("Retry-After") == "" || p.RetryAfter < 1 {
				t.Fatalf("503 without Retry-After: %+v", p)
			}
		})
	}
	// Refusals that need no Redis still come first.
	problem(t, e.post(paymentPath, `{"amount":"x"}`, ""), http.StatusBadRequest)
}
