package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/dedup/storage"
	"github.com/onceq/onceq/internal/api"
	"github.com/onceq/onceq/internal/testenv"
	"github.com/onceq/onceq/tasks"
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(latencyClientEnv); spec != "" {
		os.Exit(latencyClient(spec)) // BenchmarkPaymentLatency's client process
	}
	os.Exit(redistest.Main(m))
}

const (
	token  = "test-token"
	source = "acme"
	secret = "whsec-acme"
)

// env is one API on a fresh Redis database, served over a real socket.
type env struct {
	t       testing.TB
	rdb     redis.UniversalClient
	jobs    storage.Store // the producer's and workers' records
	replays storage.Store // the API's HTTP replay records
	insp    *asynq.Inspector
	h       *api.Handler
	srv     *httptest.Server

	mu        sync.Mutex
	now       time.Time
	decisions []dedup.Event
}

func newEnv(t testing.TB, mods ...func(*api.Options)) *env {
	t.Helper()
	return newEnvOn(t, redistest.Client(t), mods...)
}

func newEnvOn(t testing.TB, rdb redis.UniversalClient, mods ...func(*api.Options)) *env {
	t.Helper()
	e := &env{t: t, rdb: rdb, insp: asynq.NewInspectorFromRedisClient(rdb), now: time.Now()}
	var err error
	if e.jobs, err = dedup.NewRedisStore(rdb, storage.Options{}); err != nil {
		t.Fatal(err)
	}
	if e.replays, err = dedup.NewRedisStore(rdb, storage.Options{DoneTTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	o := api.Options{
		Producer:       oncetest.NewProducer(t, rdb, e.jobs, dedup.ProducerOptions{}),
		Store:          e.replays,
		Redis:          rdb,
		Tokens:         []string{"old-token", token},
		WebhookSecrets: map[string][]string{source: {secret}},
		MaxBodyBytes:   4 << 10,
		Observer: func(_ context.Context, d dedup.Event) {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.decisions = append(e.decisions, d)
		},
		Now: func() time.Time {
			e.mu.Lock()
			defer e.mu.Unlock()
			return e.now
		},
	}
	for _, m := range mods {
		m(&o)
	}
	h, err := api.New(o)
	if err != nil {
		t.Fatal(err)
	}
	e.h = h
	// After the server closes, before Redis does: answers already sent
	// finish their writes.
	t.Cleanup(func() { h.Drain(context.Background()) })
	e.srv = httptest.NewServer(h)
	t.Cleanup(e.srv.Close)
	return e
}

// reply is a response read in full.
type reply struct {
	Status int
	Header http.Header
	Body   []byte
}

// req is a request: headers are added to the defaults (JSON content type,
// the bearer token); a header set to "" is removed.
type req struct {
	method, path, body string
	header             map[string]string
}

func (e *env) do(r req) reply {
	e.t.Helper()
	return e.doT(e.t, r)
}

// doT is do for subtests, which must fail themselves, not their parent.
func (e *env) doT(t testing.TB, r req) reply {
	t.Helper()
	rep, err := e.try(r)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// try is do that returns its error, for goroutines (which must not fail
// the test themselves).
func (e *env) try(r req) (reply, error) {
	if r.method == "" {
		r.method = http.MethodPost
	}
	hr, err := http.NewRequest(r.method, e.srv.URL+r.path, strings.NewReader(r.body))
	if err != nil {
		return reply{}, err
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Authorization", "Bearer "+token)
	for k, v := range r.header {
		if v == "" {
			hr.Header.Del(k)
		} else {
			hr.Header.Set(k, v)
		}
	}
	resp, err := e.srv.Client().Do(hr)
	if err != nil {
		return reply{}, fmt.Errorf("%s %s: %v", r.method, r.path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{}, err
	}
	return reply{Status: resp.StatusCode, Header: resp.Header, Body: b}, nil
}

// post sends body to path with an optional Idempotency-Key.
func (e *env) post(path, body, key string) reply {
	e.t.Helper()
	r := req{path: path, body: body}
	if key != "" {
		r.header = map[string]string{"Idempotency-Key": key}
	}
	return e.do(r)
}

// webhook delivers body signed now (by the env's clock) with key.
func (e *env) webhook(body, key string) reply {
	e.t.Helper()
	return e.do(req{path: "/v1/webhooks/" + source, body: body, header: map[string]string{
		"Idempotency-Key":   key,
		"Authorization":     "",
		api.SignatureHeader: testenv.Sign(secret, e.clock(), []byte(body)),
	}})
}

func (e *env) clock() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.now
}

func (e *env) advance(d time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.now = e.now.Add(d)
}

// tasks counts every task in every queue, in any state.
func (e *env) tasks() int {
	e.t.Helper()
	queues, err := e.insp.Queues()
	if err != nil {
		e.t.Fatal(err)
	}
	n := 0
	for _, q := range queues {
		info, err := e.insp.GetQueueInfo(q)
		if err != nil {
			e.t.Fatal(err)
		}
		n += info.Size + info.Completed
	}
	return n
}

// pending lists the pending tasks of queue.
func (e *env) pending(queue string) []*asynq.TaskInfo {
	e.t.Helper()
	ts, err := e.insp.ListPendingTasks(queue)
	if err != nil && !strings.Contains(err.Error(), "queue not found") {
		e.t.Fatal(err)
	}
	return ts
}

func (e *env) outcomes(o dedup.Decision) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, d := range e.decisions {
		if d.Outcome == o {
			n++
		}
	}
	return n
}

// accepted decodes a 200 or 202 body after checking status and type.
func accepted(t testing.TB, r reply, status int) api.Accepted {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status %d, want %d: %s", r.Status, status, r.Body)
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q, want application/json", ct)
	}
	var a api.Accepted
	dec := json.NewDecoder(bytes.NewReader(r.Body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		t.Fatalf("body %s: %v", r.Body, err)
	}
	return a
}

// problem checks that r is an RFC 9457 problem with status and returns it.
func problem(t testing.TB, r reply, status int) api.Problem {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status %d, want %d: %s", r.Status, status, r.Body)
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json: %s", ct, r.Body)
	}
	var p api.Problem
	dec := json.NewDecoder(bytes.NewReader(r.Body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("problem %s: %v", r.Body, err)
	}
	if p.Status != status || !strings.HasPrefix(p.Type, api.ProblemType) || p.Title == "" {
		t.Fatalf("problem %+v: want status %d, a %s type and a title", p, status, api.ProblemType)
	}
	for _, bad := range []string{"goroutine ", ".go:", "redis: ", "dial tcp"} {
		if strings.Contains(string(r.Body), bad) {
			t.Fatalf("problem leaks internals (%q): %s", bad, r.Body)
		}
	}
	return p
}

const (
	paymentPath = "/v1/payments"
	emailPath   = "/v1/emails"
	scanPath    = "/v1/scans"
)

func paymentBody(id, account string, amount int) string {
	b, _ := json.Marshal(tasks.Payment{PaymentID: id, Account: account, Amount: int64(amount), Currency: "EUR"})
	return string(b)
}

func eventBody(id string, attempt int) string {
	b, _ := json.Marshal(api.WebhookEvent{ID: id, Type: "user.created", Attempt: attempt,
		Data: json.RawMessage(`{"user_id":"u1","email":"ada@example.com"}`)})
	return string(b)
}
