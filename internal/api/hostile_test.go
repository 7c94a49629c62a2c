package api_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest"
	"github.com/onceq/onceq/dedup/storage"
	"github.com/onceq/onceq/internal/api"
	"github.com/onceq/onceq/internal/testenv"
)

// A corpus of hostile requests: each gets a clear 4xx problem, nothing is
// enqueued, and the API keeps serving.
func TestHostileCorpus(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	deep := strings.Repeat(`[`, 2000) + strings.Repeat(`]`, 2000)
	good := paymentBody("pmt-ok", "acct-1", 100)
	cases := []struct {
		name   string
		r      req
		status int
	}{
		{"truncated", req{path: paymentPath, body: `{"payment_id":"p","account":`}, 400},
		{"deeply nested", req{path: paymentPath, body: deep}, 400},
		{"nested in a field", req{path: emailPath, body: `{"to":"a@example.com","subject":"s","body":` + strings.Repeat("[", 1900) + strings.Repeat("]", 1900) + `}`}, 400},
		{"oversized", req{path: emailPath, body: `{"to":"a@example.com","subject":"s","body":"` + strings.Repeat("x", 8<<10) + `"}`}, 413},
		{"not an object", req{path: paymentPath, body: `[1,2,3]`}, 400},
		{"wrong type", req{path: paymentPath, body: `{"payment_id":"p","account":"a","amount":"100","currency":"EUR"}`}, 400},
		{"float amount", req{path: paymentPath, body: `{"payment_id":"p","account":"a","amount":1.5,"currency":"EUR"}`}, 400},
		{"huge amount", req{path: paymentPath, body: `{"payment_id":"p","account":"a","amount":1e400,"currency":"EUR"}`}, 400},
		{"unknown field", req{path: paymentPath, body: `{"payment_id":"p","account":"a","amount":1,"currency":"EUR","admin":true}`}, 400},
		{"trailing data", req{path: paymentPath, body: good + `{}`}, 400},
		{"invalid utf-8", req{path: emailPath, body: "{\"to\":\"a@example.com\",\"subject\":\"\xff\xfe\",\"body\":\"b\"}"}, 400},
		{"brace in payment id", req{path: paymentPath, body: paymentBody("p{1}", "acct-1", 100)}, 400},
		{"control char in payment id", req{path: paymentPath, body: paymentBody("p\u0007", "acct-1", 100)}, 400},
		{"header injection", req{path: emailPath, body: `{"to":"a@example.com","subject":"s\r\nBcc: all@example.com","body":"b"}`}, 400},
		{"traversal", req{path: scanPath, body: `{"path":"../../etc/passwd"}`}, 400},
		{"absolute path", req{path: scanPath, body: `{"path":"/etc/passwd"}`}, 400},
		{"traversal inside", req{path: scanPath, body: `{"path":"docs/../../secret"}`}, 400},
		{"NUL in path", req{path: scanPath, body: `{"path":"a\u0000b"}`}, 400},
		{"control char key", req{path: paymentPath, body: good, header: map[string]string{"Idempotency-Key": "k\ty"}}, 400},
		{"overlong key", req{path: paymentPath, body: good, header: map[string]string{"Idempotency-Key": strings.Repeat("k", 300)}}, 400},
		{"disagreeing keys", req{path: paymentPath, body: good, header: map[string]string{"Idempotency-Key": "a", "X-Idempotency-Key": "b"}}, 400},
		{"no token", req{path: paymentPath, body: good, header: map[string]string{"Authorization": ""}}, 401},
		{"wrong token", req{path: paymentPath, body: good, header: map[string]string{"Authorization": "Bearer nope"}}, 401},
		{"token as basic", req{path: paymentPath, body: good, header: map[string]string{"Authorization": "Basic dGVzdC10b2tlbg=="}}, 401},
		{"jobs without token", req{method: "GET", path: "/v1/jobs/payment:charge%2Fp", header: map[string]string{"Authorization": ""}}, 401},
		{"text body", req{path: paymentPath, body: good, header: map[string]string{"Content-Type": "text/plain"}}, 415},
		{"unsigned webhook", req{path: "/v1/webhooks/" + source, body: eventBody("evt-h", 1), header: map[string]string{"Idempotency-Key": "h1", "Authorization": ""}}, 401},
		{"forged webhook", req{path: "/v1/webhooks/" + source, body: eventBody("evt-h", 1), header: map[string]string{
			"Idempotency-Key": "h2", "Authorization": "", api.SignatureHeader: testenv.Sign("wrong-secret", e.clock(), []byte(eventBody("evt-h", 1)))}}, 401},
		{"signature for another body", req{path: "/v1/webhooks/" + source, body: eventBody("evt-h", 1), header: map[string]string{
			"Idempotency-Key": "h3", "Authorization": "", api.SignatureHeader: testenv.Sign(secret, e.clock(), []byte(eventBody("evt-other", 1)))}}, 401},
		{"unknown source", req{path: "/v1/webhooks/nobody", body: eventBody("evt-h", 1), header: map[string]string{"Idempotency-Key": "h4"}}, 401},
		{"source traversal", req{path: "/v1/webhooks/..%2F..%2Fadmin", body: eventBody("evt-h", 1), header: map[string]string{"Idempotency-Key": "h5"}}, 401},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := e.doT(t, c.r)
			problem(t, r, c.status)
			if v := r.Header.Get("Access-Control-Allow-Origin"); v != "" {
				t.Fatalf("CORS header %q", v)
			}
		})
	}
	// Cross-origin preflight gets nothing permissive.
	r := e.do(req{method: http.MethodOptions, path: paymentPath, header: map[string]string{
		"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"}})
	if r.Header.Get("Access-Control-Allow-Origin") != "" || r.Status < 400 {
		t.Fatalf("preflight: %d %v", r.Status, r.Header)
	}
	if n := e.tasks(); n != 0 {
		t.Fatalf("%d tasks enqueued by hostile requests", n)
	}
	accepted(t, e.post(paymentPath, good, ""), http.StatusAccepted) // still serving
}

// FuzzIngest throws arbitrary bodies at every POST route: the API never
// answers 5xx or panics, always answers JSON, and only valid jobs are accepted.
func FuzzIngest(f *testing.F) {
	for _, s := range []string{
		paymentBody("pmt-1", "acct-1", 100), `{"to":"a@example.com","subject":"s","body":"b"}`,
		`{"path":"docs/a.pdf","mode":"full"}`, `{`, `[]`, `null`, `{"amount":-1}`, `{"path":"../x"}`,
	} {
		f.Add(0, []byte(s))
		f.Add(1, []byte(s))
		f.Add(2, []byte(s))
	}
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(mr.Close)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	f.Cleanup(func() { rdb.Close() })
	store, err := dedup.NewRedisStore(rdb, storage.Options{})
	if err != nil {
		f.Fatal(err)
	}
	h, err := api.New(api.Options{Producer: oncetest.NewProducer(f, rdb, store, dedup.ProducerOptions{}),
		Store: store, Redis: rdb, Tokens: []string{token}, MaxBodyBytes: 4 << 10})
	if err != nil {
		f.Fatal(err)
	}
	paths := []string{paymentPath, emailPath, scanPath}
	f.Fuzz(func(t *testing.T, route int, body []byte) {
		path := paths[(route%3+3)%3]
		rq := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
		rq.Header.Set("Content-Type", "application/json")
		rq.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, rq)
		if rec.Code >= 500 {
			t.Fatalf("%s %q: %d %s", path, body, rec.Code, rec.Body)
		}
		if !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("%s %q: body is not JSON: %s", path, body, rec.Body)
		}
		if rec.Code < 300 && !json.Valid(body) {
			t.Fatalf("%s accepted invalid JSON %q", path, body)
		}
	})
}
