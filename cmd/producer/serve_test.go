package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/internal/api"
	"github.com/onceq/onceq/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }

func TestServeHelp(t *testing.T) {
	var out bytes.Buffer
	if err := serve(t.Context(), []string{"--help"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"ONCEQ_API_ADDR", "ONCEQ_API_TOKENS", "ONCEQ_WEBHOOK_SECRETS", "ONCEQ_WEBHOOK_TOLERANCE", "ONCEQ_GITHUB_REPLAY_WINDOW",
		"ONCEQ_MAX_BODY_BYTES", "ONCEQ_WEBHOOK_BODY_BUDGET", "ONCEQ_REPLAY_TTL", "ONCEQ_REDIS_URL"} {
		if !strings.Contains(out.String(), v) {
			t.Errorf("--help does not list %s", v)
		}
	}
	if err := serve(t.Context(), []string{"extra"}, io.Discard, io.Discard); err == nil {
		t.Error("serve accepted an argument")
	}
}

// A client named like one of the API's own principals is refused at
// start, before anything listens.
func TestServeRefusesReservedClientName(t *testing.T) {
	rdb := redistest.Client(t)
	opt := rdb.Options()
	t.Setenv("ONCEQ_REDIS_URL", fmt.Sprintf("redis://%s/%d", opt.Addr, opt.DB))
	t.Setenv("ONCEQ_API_ADDR", "127.0.0.1:0")
	t.Setenv("ONCEQ_API_TOKENS", "webhook-acme:tok-acme-0123456789")
	err := serve(t.Context(), nil, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "reserved") {
		t.Fatalf("serve with a client named webhook-acme: %v, want refused as reserved", err)
	}
}

// Redis down at start: serve stays up, not ready, retrying (no crash loop),
// and stops cleanly on its signal.
func TestServeRedisUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	api := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	t.Setenv("ONCEQ_REDIS_URL", "redis://"+addr+"?dial_timeout=200ms&max_retries=0")
	t.Setenv("ONCEQ_API_ADDR", api)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, nil, io.Discard, io.Discard) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + api + "/readyz")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(b), "starting: waiting for Redis") {
				t.Fatalf("readyz without Redis: %d %q", resp.StatusCode, b)
			}
			break
		}
		select {
		case err := <-done:
			t.Fatalf("serve exited without Redis: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve never answered /readyz: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Tokenless on loopback: a page that pointed its own name here is
	// refused before any route.
	testenv.RequireRebindRefused(t, http.MethodPost, "http://"+api+"/v1/payments")
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve stopped while waiting for Redis: %v, want a clean stop", err)
	}
}

func TestServe(t *testing.T) {
	rdb := redistest.Client(t)
	opt := rdb.Options()
	t.Setenv("ONCEQ_REDIS_URL", fmt.Sprintf("redis://%s/%d", opt.Addr, opt.DB))
	t.Setenv("ONCEQ_API_ADDR", "127.0.0.1:0")
	// shop rotates its token (two entries, one client); bob is another client.
	t.Setenv("ONCEQ_API_TOKENS", "shop:tok-one-0123456789,shop:tok-two-0123456789,bob:bob-token-0123456789")
	t.Setenv("ONCEQ_WEBHOOK_SECRETS", "acme:whsec-acme")
	t.Setenv("ONCEQ_LOG_LEVEL", "debug")

	s := startServe(t)
	base, stderr := "http://"+s.addr, s.logs
	if !strings.Contains(stderr.String(), base) {
		t.Errorf("the bound address %s is not logged:\n%s", base, stderr.String())
	}

	call := func(method, path, body string, h map[string]string) (int, http.Header, string) {
		t.Helper()
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	const bob = "bob-token-0123456789"
	auth := func(tok string, more map[string]string) map[string]string {
		h := map[string]string{"Authorization": "Bearer " + tok, "Content-Type": "application/json"}
		for k, v := range more {
			h[k] = v
		}
		return h
	}

	if code, _, _ := call("GET", "/healthz", "", nil); code != 200 {
		t.Errorf("/healthz %d", code)
	}
	if code, _, _ := call("GET", "/readyz", "", nil); code != 200 {
		t.Errorf("/readyz %d", code)
	}
	if code, _, _ := call("GET", "/metrics", "", nil); code != 401 {
		t.Errorf("/metrics without the token: %d, want 401", code)
	}

	payment := `{"payment_id":"pmt-serve-1","account":"acct-s","amount":2500,"currency":"EUR"}`
	if code, _, body := call("POST", "/v1/payments", payment, auth("nope", nil)); code != 401 {
		t.Fatalf("bad token: %d %s", code, body)
	}
	code, _, first := call("POST", "/v1/payments", payment, auth("tok-two-0123456789", map[string]string{"Idempotency-Key": "order-s1"}))
	if code != 202 || !strings.Contains(first, `"key":"payment:charge/pmt-serve-1"`) {
		t.Fatalf("payment: %d %s", code, first)
	}
	code, h, again := call("POST", "/v1/payments", payment, auth("tok-one-0123456789", map[string]string{"Idempotency-Key": "order-s1"}))
	if code != 202 || again != first || h.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d %s %v", code, again, h)
	}

	// Bob, from outside: neither Alice's (shop's) replay nor her job.
	code, _, body := call("POST", "/v1/payments", `{"payment_id":"pmt-bob-1","account":"acct-bob","amount":100,"currency":"EUR"}`,
		auth(bob, map[string]string{"Idempotency-Key": "order-s1"}))
	if code != 202 {
		t.Fatalf("bob's own payment under shop's key: %d %s", code, body)
	}
	code, h, body = call("POST", "/v1/payments", payment, auth(bob, map[string]string{"Idempotency-Key": "order-s2"}))
	if code != 409 || h.Get("Idempotent-Replayed") != "" || !strings.Contains(body, "payment-id-held") || strings.Contains(body, "task_id") {
		t.Fatalf("bob reusing shop's payment id: %d %v %s", code, h, body)
	}
	if code, _, body := call("GET", "/v1/jobs/payment:charge%2Fpmt-serve-1", "", auth(bob, nil)); code != 404 {
		t.Fatalf("bob reads shop's job: %d %s", code, body)
	}
	// A wrong guess at the content of shop's payment is answered as the
	// right one was: no oracle on its amount.
	wrongCode, _, wrong := call("POST", "/v1/payments", strings.Replace(payment, "2500", "2600", 1), auth(bob, map[string]string{"Idempotency-Key": "order-s3"}))
	if wrongCode != code || wrong != body {
		t.Fatalf("bob's right guess %d %s, wrong guess %d %s: want one answer", code, body, wrongCode, wrong)
	}
	// Bob's explicit "shop:reset-1" is his own job: shop's email under its
	// key reset-1 is enqueued, not refused.
	if code, _, body := call("POST", "/v1/emails", `{"id":"shop:reset-1","to":"bob@example.com","subject":"s","body":"b"}`, auth(bob, nil)); code != 202 {
		t.Fatalf("bob's email: %d %s", code, body)
	}
	if code, _, body := call("POST", "/v1/emails", `{"to":"shop@example.com","subject":"Reset","body":"code"}`,
		auth("tok-one-0123456789", map[string]string{"Idempotency-Key": `"reset-1"`})); code != 202 || !strings.Contains(body, `"decision":"enqueued"`) {
		t.Fatalf("shop's email under its own key after bob's squat: %d %s", code, body)
	}
	// Strict JSON and HTTP conformance, every error a problem.
	for _, c := range []struct {
		method, path, body string
		want               int
	}{
		{"POST", "/v1/payments", `{"payment_id":"p","account":"a","amount":1,"amount":2,"currency":"EUR"}`, 400},
		{"DELETE", "/v1/payments", "", 405},
		{"GET", "/v1/jobs", "", 404},
		{"GET", "/elsewhere", "", 404},
		{"GET", "/metrics", "", 401},
	} {
		code, h, body := call(c.method, c.path, c.body, auth(bob, nil))
		if c.path == "/metrics" {
			code, h, body = call(c.method, c.path, c.body, nil)
		}
		var p api.Problem
		if code != c.want || h.Get("Content-Type") != "application/problem+json" || json.Unmarshal([]byte(body), &p) != nil || p.Status != code {
			t.Errorf("%s %s: %d %s %s, want a %d problem", c.method, c.path, code, h.Get("Content-Type"), body, c.want)
		}
		if code == 405 && h.Get("Allow") != "POST" {
			t.Errorf("405 Allow %q", h.Get("Allow"))
		}
	}
	if code, _, _ := call("GET", "/metrics", "", auth(bob, nil)); code != 200 {
		t.Errorf("/metrics with bob's token: %d", code)
	}

	event := `{"id":"evt_s1","type":"user.created","data":{"user_id":"u1","email":"ada@example.com"}}`
	code, _, body = call("POST", "/v1/webhooks/acme", event, map[string]string{"Content-Type": "application/json",
		"Idempotency-Key": "d-1", api.SignatureHeader: testenv.Sign("whsec-acme", time.Now(), []byte(event))})
	if code != 202 {
		t.Fatalf("webhook: %d %s", code, body)
	}
	code, _, body = call("GET", "/v1/jobs/payment:charge%2Fpmt-serve-1", "", auth("tok-one-0123456789", nil))
	if code != 200 || !strings.Contains(body, `"state":"pending"`) {
		t.Fatalf("job: %d %s", code, body)
	}

	// Producer-side refusals are logged and counted like the worker's decisions.
	for _, c := range []struct {
		body string
		code int
	}{
		{payment, 200}, // the same payment without the replay key: a duplicate
		{`{"payment_id":"pmt-serve-1","account":"acct-x","amount":9900,"currency":"EUR"}`, 422}, // conflict
		{`{"payment_id":"pmt-serve-2","account":"acct-s","amount":2500,"currency":"EUR"}`, 429}, // throttled
	} {
		if code, _, body := call("POST", "/v1/payments", c.body, auth("tok-one-0123456789", nil)); code != c.code {
			t.Fatalf("payment %s: %d %s, want %d", c.body, code, body, c.code)
		}
	}
	for _, want := range []string{`"outcome":"conflict"`, `"outcome":"throttled"`, `"outcome":"duplicate"`} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("no decision logged with %s", want)
		}
	}

	code, _, metrics := call("GET", "/metrics", "", auth("tok-one-0123456789", nil))
	if code != 200 {
		t.Fatalf("/metrics %d", code)
	}
	for _, want := range []string{
		// shop's and bob's payments; bob's reuse of shop's payment id and
		// shop's resend without a replay key; bob's wrong guess and shop's
		// own conflict; six requests with keys, one replayed.
		`onceq_dedup_decisions_total{key_namespace="payment:charge",outcome="enqueued",side="producer"} 2`,
		`onceq_dedup_decisions_total{key_namespace="payment:charge",outcome="duplicate",side="producer"} 2`,
		`onceq_dedup_decisions_total{key_namespace="payment:charge",outcome="conflict",side="producer"} 2`,
		`onceq_dedup_decisions_total{key_namespace="payment:charge",outcome="throttled",side="producer"} 1`,
		`onceq_dedup_decisions_total{key_namespace="http",outcome="duplicate",side="api"} 1`,
		`onceq_dedup_decisions_total{key_namespace="http",outcome="acquired",side="api"} 6`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s in\n%s", want, grepLines(metrics, "onceq_dedup_decisions_total"))
		}
	}

	if err := s.stop(); err != nil {
		t.Fatalf("serve: %v", err)
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Error("still serving after shutdown")
	}
	if !strings.Contains(stderr.String(), "stopped") {
		t.Errorf("no stop logged:\n%s", stderr.String())
	}
}

func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// producer serve's series start at zero (the producer's conflicts, the
// API's own decisions, every route's requests), and a 401 is counted and
// logged: none of them existed before its first event, and a 401 left no
// trace at all.
func TestServeMetrics(t *testing.T) {
	rdb := redistest.Client(t)
	opt := rdb.Options()
	t.Setenv("ONCEQ_REDIS_URL", fmt.Sprintf("redis://%s/%d", opt.Addr, opt.DB))
	t.Setenv("ONCEQ_API_ADDR", "127.0.0.1:0")
	t.Setenv("ONCEQ_API_TOKENS", "shop:tok-shop-0123456789")
	s := startServe(t)
	addr, stderr := s.addr, s.logs
	metrics := func() string {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+addr+"/metrics", nil)
		req.Header.Set("Authorization", "Bearer tok-shop-0123456789")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	m := metrics()
	for _, want := range []string{
		`onceq_dedup_decisions_total{key_namespace="payment:charge",outcome="conflict",side="producer"} 0`,
		`onceq_dedup_decisions_total{key_namespace="http",outcome="conflict",side="api"} 0`,
		`onceq_http_requests_total{code="401",route="POST /v1/payments"} 0`,
		`onceq_http_requests_total{code="202",route="POST /v1/emails"} 0`,
		`onceq_http_request_duration_seconds_count{code="429",route="POST /v1/payments"} 0`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics at start lacks %s", want)
		}
	}
	resp, err := http.Post("http://"+addr+"/v1/payments", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("POST without a token: %d, want 401", resp.StatusCode)
	}
	if m := metrics(); !strings.Contains(m, `onceq_http_requests_total{code="401",route="POST /v1/payments"} 1`) {
		t.Errorf("the 401 was not counted")
	}
	if !strings.Contains(stderr.String(), `"msg":"api: unauthorized"`) {
		t.Errorf("the 401 was not logged:\n%s", stderr.String())
	}
}
