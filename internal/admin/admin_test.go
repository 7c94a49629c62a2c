package admin_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/onceq/onceq/internal/admin"
)

func serve(t *testing.T, o admin.Options) string {
	t.Helper()
	mux := http.NewServeMux()
	admin.Routes(mux, o)
	s, err := admin.Listen("127.0.0.1:0", mux)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(context.Background()) })
	return "http://" + s.Addr()
}

func do(t *testing.T, method, url string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestRoutesAndAuth(t *testing.T) {
	t.Parallel()
	var ready error = errors.New("redis: connection refused")
	dash := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("dashboard")) })
	base := serve(t, admin.Options{
		Token:     "s3cret-token",
		Ready:     func(context.Context) error { return ready },
		Gatherer:  prometheus.NewRegistry(),
		Dashboard: dash,
	})
	tests := []struct {
		name, path string
		hdr        map[string]string
		want       int
	}{
		{"liveness needs no auth and no redis", "/healthz", nil, 200},
		{"readiness reports redis down", "/readyz", nil, 503},
		{"metrics without token", "/metrics", nil, 401},
		{"metrics with bearer", "/metrics", map[string]string{"Authorization": "Bearer s3cret-token"}, 200},
		{"metrics with bearer in lower case", "/metrics", map[string]string{"Authorization": "bearer s3cret-token"}, 200},
		{"metrics with wrong bearer", "/metrics", map[string]string{"Authorization": "Bearer s3cret-tokeX"}, 401},
		{"metrics with prefix of token", "/metrics", map[string]string{"Authorization": "Bearer s3cret"}, 401},
		{"dashboard without token", "/monitoring/", nil, 401},
		{"dashboard with basic auth", "/monitoring/", map[string]string{"Authorization": "Basic dTpzM2NyZXQtdG9rZW4="}, 200},
		{"dashboard cross-origin without token", "/monitoring/api/queues", map[string]string{"Origin": "https://evil.example"}, 401},
	}
	for _, tt := range tests {
		resp, body := do(t, "GET", base+tt.path, tt.hdr)
		if resp.StatusCode != tt.want {
			t.Errorf("%s: %d %q, want %d", tt.name, resp.StatusCode, body, tt.want)
		}
		if v := resp.Header.Get("Access-Control-Allow-Origin"); v != "" {
			t.Errorf("%s: permissive CORS header %q", tt.name, v)
		}
	}
	ready = nil
	if resp, _ := do(t, "GET", base+"/readyz", nil); resp.StatusCode != 200 {
		t.Fatalf("readyz with redis up: %d", resp.StatusCode)
	}
	if resp, _ := do(t, "POST", base+"/healthz", nil); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST /healthz: %d", resp.StatusCode)
	}
}

func TestNoTokenLeavesOpen(t *testing.T) {
	t.Parallel()
	h := admin.RequireToken("", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) }))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != 204 {
		t.Fatalf("open handler: %d", rec.Code)
	}
	rec = httptest.NewRecorder()
	admin.RequireToken("x", h).ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != 401 || !strings.Contains(rec.Header().Get("WWW-Authenticate"), "Basic") {
		t.Fatalf("guarded handler without credentials: %d %v", rec.Code, rec.Header())
	}
}
