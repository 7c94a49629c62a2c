package gateway

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

const chargeBody = `{"payment_id":"pay_1","account":"acct_42","amount":500,"currency":"EUR"}`

func post(t *testing.T, url string, header map[string]string, body string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func TestServerHTTP(t *testing.T) {
	t.Parallel()
	gw, srv := testServer(t, "tok")
	url := srv.URL + "/v1/charges"
	auth := func(key string) map[string]string {
		return map[string]string{"Authorization": "Bearer tok", "Idempotency-Key": key}
	}

	resp, first := post(t, url, auth("k1"), chargeBody)
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first: %d %q replayed=%q", resp.StatusCode, first, resp.Header.Get("Idempotent-Replayed"))
	}
	// Same request, other spelling: still a replay, not a mismatch.
	respelled := `{ "currency":"EUR", "amount":500, "account":"acct_42", "payment_id":"pay_1" }`
	resp, again := post(t, url, auth("k1"), respelled)
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("Idempotent-Replayed") != "true" || again != first {
		t.Errorf("repeat: %d replayed=%q body %q; want 201, true, %q", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), again, first)
	}

	tests := []struct {
		name   string
		method string
		path   string
		header map[string]string
		body   string
		want   int
	}{
		{"missing key", "POST", "/v1/charges", map[string]string{"Authorization": "Bearer tok"}, chargeBody, 400},
		{"bad key", "POST", "/v1/charges", auth("has space"), chargeBody, 400},
		{"no token", "POST", "/v1/charges", map[string]string{"Idempotency-Key": "k2"}, chargeBody, 401},
		{"wrong token", "POST", "/v1/charges", map[string]string{"Authorization": "Bearer tok2", "Idempotency-Key": "k2"}, chargeBody, 401},
		{"basic auth", "POST", "/v1/charges", map[string]string{"Authorization": "Basic dG9r", "Idempotency-Key": "k2"}, chargeBody, 401},
		{"same key, other body", "POST", "/v1/charges", auth("k1"), strings.Replace(chargeBody, "500", "501", 1), 422},
		{"unknown field", "POST", "/v1/charges", auth("k3"), strings.Replace(chargeBody, "}", `,"tip":1}`, 1), 400},
		{"trailing data", "POST", "/v1/charges", auth("k3"), chargeBody + "{}", 400},
		{"invalid payment", "POST", "/v1/charges", auth("k3"), strings.Replace(chargeBody, "500", "-1", 1), 400},
		{"float amount", "POST", "/v1/charges", auth("k3"), strings.Replace(chargeBody, "500", "5.5", 1), 400},
		{"too large", "POST", "/v1/charges", auth("k3"), `{"description":"` + strings.Repeat("x", maxBody) + `"}`, 413},
		{"not JSON", "POST", "/v1/charges", map[string]string{"Authorization": "Bearer tok", "Idempotency-Key": "k3", "Content-Type": "text/plain"}, chargeBody, 415},
		{"GET", "GET", "/v1/charges", auth("k3"), "", 405},
		{"other path", "POST", "/v1/refunds", auth("k3"), chargeBody, 404},
	}
	for _, tt := range tests {
		req, err := http.NewRequest(tt.method, srv.URL+tt.path, strings.NewReader(tt.body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		for k, v := range tt.header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var problem struct {
			Status int    `json:"status"`
			Detail string `json:"detail"`
		}
		err = json.NewDecoder(resp.Body).Decode(&problem)
		resp.Body.Close()
		if resp.StatusCode != tt.want || problem.Status != tt.want || err != nil ||
			resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s: %d %+v (%v), content type %q; want a %d problem", tt.name, resp.StatusCode, problem, err, resp.Header.Get("Content-Type"), tt.want)
		}
		if tt.want == 401 && resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: 401 without WWW-Authenticate", tt.name)
		}
	}
	if gw.Total() != 1 || gw.Charges("k1") != 1 || gw.Charges("k2")+gw.Charges("k3") != 0 {
		t.Errorf("gateway: total %d, k1 %d, k2 %d, k3 %d; want only k1's one charge",
			gw.Total(), gw.Charges("k1"), gw.Charges("k2"), gw.Charges("k3"))
	}
}

func TestServerExpiresOldKeys(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	gw := &Server{now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }}
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)
	key := func(k string) map[string]string { return map[string]string{"Idempotency-Key": k} }

	post(t, srv.URL+"/v1/charges", key("old"), chargeBody)
	advance(DefaultTTL - time.Second)
	if resp, _ := post(t, srv.URL+"/v1/charges", key("old"), chargeBody); resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("a key within the TTL was not replayed")
	}
	advance(2 * time.Second)
	post(t, srv.URL+"/v1/charges", key("new"), chargeBody)
	if gw.Charges("old") != 0 || gw.Charges("new") != 1 || len(gw.entries) != 1 {
		t.Errorf("after the TTL: old %d, new %d, %d entries; want 0, 1, 1", gw.Charges("old"), gw.Charges("new"), len(gw.entries))
	}
	// Past its TTL a key is new again.
	if resp, _ := post(t, srv.URL+"/v1/charges", key("old"), chargeBody); resp.StatusCode != 201 || resp.Header.Get("Idempotent-Replayed") != "" || gw.Total() != 3 {
		t.Errorf("an expired key: %d replayed=%q total %d; want a new charge", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), gw.Total())
	}
}
