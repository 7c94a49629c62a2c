package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq/dedup/oncetest/redistest"
)

// From outside, against `producer serve`: Redis stalls (SIGSTOP) during a
// request; once it is back, a retry with the same key succeeds within 5 s,
// although the stalled claim ran after the API gave up on it.
func TestServeRetryAfterRedisPause(t *testing.T) {
	retryAfterPause(t, "500ms", 0, 5*time.Second)
}

// A 4 s pause under the default 3 s read timeout: the API's Redis client
// re-sends nothing (a re-sent claim met itself as another request's and
// answered 409 for 11 s), so the retry succeeds within 2 s, as one job.
func TestServeRetryAfterLongRedisPause(t *testing.T) {
	retryAfterPause(t, "", 4*time.Second, 2*time.Second)
}

// retryAfterPause posts a payment while Redis is paused for pause (until
// the request ends, when 0), then retries it until it is accepted, at most
// within after Redis resumed; exactly one task must result.
func retryAfterPause(t *testing.T, readTimeout string, pause, within time.Duration) {
	srv := redistest.Start(t)
	t.Setenv("ONCEQ_REDIS_URL", "redis://"+srv.Addr+"/0")
	if readTimeout != "" {
		t.Setenv("ONCEQ_REDIS_READ_TIMEOUT", readTimeout)
	}
	t.Setenv("ONCEQ_API_ADDR", "127.0.0.1:0")
	t.Setenv("ONCEQ_API_TOKENS", "shop:tok-one-0123456789")

	s := startServe(t)
	base, stderr := "http://"+s.addr, s.logs
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
	first := make(chan int, 1)
	go func() { first <- post("pmt-paused", "paused-1") }()
	code := 0
	if pause > 0 {
		time.Sleep(pause)
	} else {
		code = <-first
	}
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	if pause > 0 {
		code = <-first
	}
	code0 := code
	if code != http.StatusServiceUnavailable && code != http.StatusAccepted {
		t.Fatalf("request during the pause: %d, want 503 (or 202 had it outlived the pause)", code)
	}
	for code = post("pmt-paused", "paused-1"); code != http.StatusAccepted; code = post("pmt-paused", "paused-1") {
		if time.Since(resumed) > within {
			t.Fatalf("%s after Redis resumed the retry still gets %d\n%s", within, code, stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("the request during the pause got %d; its retry succeeded %s after Redis resumed", code0, time.Since(resumed).Round(time.Millisecond))
	rdb := srv.Client(t)
	if n, err := rdb.Exists(context.Background(), "asynq:{critical}:t:payment:charge=pmt~paused").Result(); err != nil || n != 1 {
		t.Fatalf("the paused payment's task: %d (%v), want one", n, err)
	}
	if n, _ := rdb.LLen(context.Background(), "asynq:{critical}:pending").Result(); n != 4 {
		t.Fatalf("%d pending payments, want 4: three warm-ups and the paused one, once", n)
	}
}
