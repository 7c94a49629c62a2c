package api_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq/internal/api"
	"github.com/onceq/onceq/internal/testenv"
)

// Methods the API does not serve on a path it has: 405 with Allow.
func TestMethodNotAllowed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, c := range []struct{ method, path, allow string }{
		{http.MethodDelete, paymentPath, "POST"},
		{http.MethodGet, paymentPath, "POST"},
		{http.MethodPut, emailPath, "POST"},
		{http.MethodGet, "/v1/webhooks/" + source, "POST"},
		{http.MethodPost, "/v1/jobs/payment:charge%2Fx", "GET, HEAD, DELETE"},
	} {
		r := e.do(req{method: c.method, path: c.path})
		problem(t, r, http.StatusMethodNotAllowed)
		if r.Header.Get("Allow") != c.allow {
			t.Errorf("%s %s: Allow %q, want %q", c.method, c.path, r.Header.Get("Allow"), c.allow)
		}
	}
	// Paths the API does not have: 404 problems, and no redirect.
	for _, path := range []string{"/v1/jobs", "/v1/nope", "/", "/elsewhere"} {
		r := e.do(req{method: http.MethodGet, path: path})
		problem(t, r, http.StatusNotFound)
	}
}

// A webhook 401 carries a challenge like every other 401.
func TestWebhook401HasChallenge(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.do(req{path: "/v1/webhooks/" + source, body: eventBody("evt_c", 1),
		header: map[string]string{"Authorization": "", "Idempotency-Key": "c-1", api.SignatureHeader: "t=1,v1=00"}})
	problem(t, r, http.StatusUnauthorized)
	if r.Header.Get("WWW-Authenticate") == "" {
		t.Fatal("webhook 401 without WWW-Authenticate")
	}
}

// Several secrets per source while the sender rotates: a delivery signed
// by either is accepted, one signed by neither is not.
func TestWebhookSecretRotation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *api.Options) { o.WebhookSecrets = map[string][]string{source: {"whsec-old", "whsec-new"}} })
	for i, sec := range []string{"whsec-old", "whsec-new", "whsec-other"} {
		body := eventBody("evt_rot"+string(rune('a'+i)), 1)
		r := e.do(req{path: "/v1/webhooks/" + source, body: body, header: map[string]string{"Authorization": "",
			"Idempotency-Key": "rot-" + sec, api.SignatureHeader: testenv.Sign(sec, e.clock(), []byte(body))}})
		if sec == "whsec-other" {
			problem(t, r, http.StatusUnauthorized)
			continue
		}
		accepted(t, r, http.StatusAccepted)
	}
}

// The errors net/http writes itself, before any handler, are problems too
// when the listener is wrapped by api.Listener.
func TestNetHTTPOwnErrorsAreProblems(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: e.srv.Config.Handler, MaxHeaderBytes: 1 << 10, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(api.Listener(ln))
	t.Cleanup(func() { srv.Close() })

	for _, c := range []struct {
		name, raw string
		status    int
	}{
		{"malformed request line", "GARBAGE\r\n\r\n", 400},
		{"no Host", "GET /v1/jobs/x HTTP/1.1\r\n\r\n", 400},
		{"headers too large", "GET /v1/jobs/x HTTP/1.1\r\nHost: a\r\nX-Big: " + strings.Repeat("a", 8<<10) + "\r\n\r\n", 431},
		{"unknown transfer coding", "POST /v1/payments HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n", 501},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(5 * time.Second))
			io.WriteString(conn, c.raw)
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			var p api.Problem
			if resp.StatusCode != c.status || resp.Header.Get("Content-Type") != "application/problem+json" ||
				json.Unmarshal(b, &p) != nil || p.Status != c.status || p.Title == "" {
				t.Fatalf("%d %v %s, want a %d problem", resp.StatusCode, resp.Header, b, c.status)
			}
		})
	}
}

// Problems rewrites a plain error another handler wrote (the mux's, a
// readiness check's http.Error), keeping its status and headers.
func TestProblemsRewritesPlainErrors(t *testing.T) {
	t.Parallel()
	h := api.Problems(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ok" {
			w.Write([]byte("fine"))
			return
		}
		w.Header().Set("Retry-After", "3")
		http.Error(w, "not ready: redis unreachable", http.StatusServiceUnavailable)
	}))
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	resp, err := http.Get(srv.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	r := reply{Status: resp.StatusCode, Header: resp.Header, Body: b}
	if p := problem(t, r, http.StatusServiceUnavailable); p.Detail != "not ready: redis unreachable" {
		t.Errorf("detail %q", p.Detail)
	}
	if resp.Header.Get("Retry-After") != "3" {
		t.Errorf("Retry-After lost: %v", resp.Header)
	}
	resp, err = http.Get(srv.URL + "/ok")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "fine" {
		t.Fatalf("success rewritten: %d %q", resp.StatusCode, b)
	}
}
