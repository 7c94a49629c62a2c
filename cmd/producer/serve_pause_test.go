package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq/internal/redistest"
	"github.com/onceq/onceq/internal/testenv"
)

// From outside, against `producer serve`: Redis stalls (SIGSTOP) during a
// request; once it is back, a retry with the same key succeeds within 5 s,
// although the stalled claim ran after the API gave up on it.
func TestServeRetryAfterRedisPause(t *testing.T) {
	srv := redistest.Start(t)
	t.Setenv("ONCEQ_REDIS_URL", "redis://"+srv.Addr+"/0")
	t.Setenv("ONCEQ_REDIS_READ_TIMEOUT", "500ms")
	t.Setenv("ONCEQ_API_ADDR", "127.0.0.1:0")
	t.Setenv("ONCEQ_API_TOKENS", "shop:tok-one-0123456789")

	ctx, cancel := context.WithCancel(t.Context())
	var stderr testenv.Buffer
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- serveWith(ctx, nil, io.Discard, &stderr, serveHooks{ready: func(addr string) { ready <- addr }})
	}()
	t.Cleanup(func() { cancel(); <-done })
	var base string
	select {
	case addr := <-ready:
		base = "http://" + addr
	case err := <-done:
		t.Fatalf("serve ended early: %v\n%s", err, stderr.String())
	case <-time.After(10 * time.Second):
		t.Fatalf("serve not ready\n%s", stderr.String())
	}
	post := func(id, key string) int {
		t.Helper()
		body := `{"payment_id":"` + id + `","account":"acct-` + id + `","amount":100,"currency":"EUR"}`
		req, _ := http.NewRequest("POST", base+"/v1/payments", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer tok-one-0123456789")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	// Warm connections, as a server in use has.
	for _, id := range []string{"warm-1", "warm-2", "warm-3"} {
		if code := post(id, id); code != http.StatusAccepted {
			t.Fatalf("warm-up: %d", code)
		}
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	code := post("pmt-paused", "paused-1")
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	if code != http.StatusServiceUnavailable {
		t.Fatalf("request during the pause: %d, want 503", code)
	}
	resumed := time.Now()
	for code = post("pmt-paused", "paused-1"); code != http.StatusAccepted; code = post("pmt-paused", "paused-1") {
		if time.Since(resumed) > 5*time.Second {
			t.Fatalf("5 s after Redis resumed the retry still gets %d\n%s", code, stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("retry succeeded %s after Redis resumed", time.Since(resumed).Round(time.Millisecond))
}
