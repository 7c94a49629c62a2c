package httpidem_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/httpidem"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/dedup/storage"
)

type reply struct {
	status int
	header http.Header
	body   string
}

func post(t *testing.T, url, key, body string, hdr ...string) reply {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, string(b)}
}

// serve mounts h behind the middleware on a real socket and a real Redis.
func serve(t *testing.T, o httpidem.MiddlewareOptions, h http.HandlerFunc) string {
	t.Helper()
	store, err := dedup.NewRedisStore(redistest.Client(t), storage.Options{DoneTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	g, err := httpidem.New(store, httpidem.Options{Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Drain(context.Background()) }) // after the server, before Redis
	srv := httptest.NewServer(g.Middleware(o)(h))
	t.Cleanup(srv.Close)
	return srv.URL
}

// A user's own handler runs once per key: the retry gets the stored bytes
// with Idempotent-Replayed, another body under the key a 422.
func TestMiddlewareReplays(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	url := serve(t, httpidem.MiddlewareOptions{}, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		n := runs.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Run", string(rune('0'+n)))
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"order":`+string(b)+`}`)
	})
	first := post(t, url+"/orders", `"ord-1"`, `1`)
	again := post(t, url+"/orders", "ord-1", `1`) // the bare form is the same key
	if first.status != http.StatusCreated || again.status != http.StatusCreated || again.body != first.body ||
		again.header.Get("X-Run") != "1" || again.header.Get(httpidem.ReplayedHeader) != "true" || first.header.Get(httpidem.ReplayedHeader) != "" {
		t.Fatalf("first %+v, retry %+v: want the retry to replay the first", first, again)
	}
	if r := post(t, url+"/orders", `"ord-1"`, `2`); r.status != http.StatusUnprocessableEntity || !strings.Contains(r.body, "idempotency-key-reused") {
		t.Fatalf("another body under the key: %d %s, want 422", r.status, r.body)
	}
	// Another path is another request: the same key is free there.
	if r := post(t, url+"/refunds", `"ord-1"`, `1`); r.status != http.StatusCreated || r.header.Get(httpidem.ReplayedHeader) != "" {
		t.Fatalf("the key on another path: %d %v", r.status, r.header)
	}
	// Without a key the handler simply runs.
	post(t, url+"/orders", "", `1`)
	if n := runs.Load(); n != 3 {
		t.Fatalf("the handler ran %d times, want 3", n)
	}
}

// A failure is not stored: its retry runs, and its success is stored.
func TestMiddlewareFailureRunsAgain(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	url := serve(t, httpidem.MiddlewareOptions{}, func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			http.Error(w, "gateway down", http.StatusBadGateway)
			return
		}
		io.WriteString(w, "charged")
	})
	if r := post(t, url+"/pay", "p-1", "x"); r.status != http.StatusBadGateway {
		t.Fatalf("first: %d", r.status)
	}
	for range 2 {
		if r := post(t, url+"/pay", "p-1", "x"); r.status != http.StatusOK || r.body != "charged" {
			t.Fatalf("retry: %d %q", r.status, r.body)
		}
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("the handler ran %d times, want 2", n)
	}
}

// A retry while the first request runs is a 409 with the claim's remaining
// time; scopes keep one caller's keys from another's.
func TestMiddlewareInFlightAndScopes(t *testing.T) {
	t.Parallel()
	release, started := make(chan struct{}), make(chan struct{}, 1)
	url := serve(t, httpidem.MiddlewareOptions{Scope: func(r *http.Request) string { return r.Header.Get("X-Client") }},
		func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-Client") == "slow" {
				started <- struct{}{}
				<-release
			}
			io.WriteString(w, "ok")
		})
	done := make(chan reply, 1)
	go func() { done <- post(t, url+"/x", "k", "b", "X-Client", "slow") }()
	<-started
	r := post(t, url+"/x", "k", "b", "X-Client", "slow")
	if r.status != http.StatusConflict || r.header.Get("Retry-After") == "" || r.header.Get("Retry-After") == "1" {
		t.Fatalf("retry in flight: %d Retry-After %q, want 409 with the minute-long claim's wait", r.status, r.header.Get("Retry-After"))
	}
	if r := post(t, url+"/x", "k", "b", "X-Client", "other"); r.status != http.StatusOK || r.header.Get(httpidem.ReplayedHeader) != "" {
		t.Fatalf("another scope's same key: %d %v", r.status, r.header)
	}
	close(release)
	if r := <-done; r.status != http.StatusOK {
		t.Fatalf("the slow request: %d", r.status)
	}
}

// Bad and missing keys are 400 problems; the handler never runs.
func TestMiddlewareBadKeys(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	url := serve(t, httpidem.MiddlewareOptions{Required: true, MaxBodyBytes: 8}, func(w http.ResponseWriter, r *http.Request) { runs.Add(1) })
	for key, want := range map[string]string{"": "idempotency-key-missing", `"a", "b"`: "bad-idempotency-key", "has space": "bad-idempotency-key"} {
		r := post(t, url+"/x", key, "b")
		if r.status != http.StatusBadRequest || !strings.Contains(r.body, want) || r.header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("key %q: %d %s, want 400 %s", key, r.status, r.body, want)
		}
	}
	if r := post(t, url+"/x", "k", "more than eight bytes"); r.status != http.StatusRequestEntityTooLarge {
		t.Errorf("oversized body: %d", r.status)
	}
	if n := runs.Load(); n != 0 {
		t.Fatalf("the handler ran %d times, want 0", n)
	}
}
