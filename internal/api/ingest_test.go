package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest"
	"github.com/onceq/onceq/internal/api"
)

func TestEnqueueEachRoute(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, c := range []struct {
		path, body, key string
		wantKey, queue  string
	}{
		{paymentPath, paymentBody("pmt-1", "acct-1", 500), "", "payment:charge/pmt-1", "critical"},
		{emailPath, `{"to":"ada@example.com","subject":"Hi","body":"Hello"}`, "mail-7", "email:send/" + api.DerivedPrincipal(token) + ":mail-7", "default"},
		{emailPath, `{"to":"ada@example.com","subject":"Hi","body":"Hello","id":"own-id"}`, "", "email:send/" + api.DerivedPrincipal(token) + ":own-id", "default"},
		{scanPath, `{"path":"inbox/a.pdf","file_id":"f-1"}`, "scan-req-1", "", "default"},
	} {
		a := accepted(t, e.post(c.path, c.body, c.key), http.StatusAccepted)
		if a.Decision != dedup.Enqueued || a.TaskID != taskIDOf(t, a.Key) || a.Queue != c.queue || a.State != "pending" {
			t.Errorf("%s %s: %+v, want enqueued on %s as its key, pending", c.path, c.body, a, c.queue)
		}
		if c.wantKey != "" && a.Key != c.wantKey {
			t.Errorf("%s: key %q, want %q", c.path, a.Key, c.wantKey)
		}
		if !strings.HasPrefix(a.Key, "scan:file/") && c.path == scanPath {
			t.Errorf("scan key %q is not a scan:file key", a.Key)
		}
	}
	if n := e.tasks(); n != 4 {
		t.Fatalf("%d tasks, want 4", n)
	}
}

func TestLocationAndNoCORS(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.do(req{path: paymentPath, body: paymentBody("pmt-loc", "acct-1", 500),
		header: map[string]string{"Origin": "https://evil.example"}})
	accepted(t, r, http.StatusAccepted)
	if got, want := r.Header.Get("Location"), "/v1/jobs/payment:charge%2Fpmt-loc"; got != want {
		t.Errorf("Location %q, want %q", got, want)
	}
	for k := range r.Header {
		if strings.HasPrefix(strings.ToLower(k), "access-control-") {
			t.Errorf("CORS header %s: %v", k, r.Header[k])
		}
	}
}

func TestProducerDuplicateIs200(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	body := paymentBody("pmt-dup", "acct-1", 700)
	accepted(t, e.post(paymentPath, body, ""), http.StatusAccepted)
	a := accepted(t, e.post(paymentPath, body, ""), http.StatusOK)
	if a.Decision != dedup.Duplicate || a.TaskID != "payment:charge=pmt~dup" || a.State != "pending" ||
		!strings.Contains(a.Reason, "already accepted") {
		t.Fatalf("duplicate %+v", a)
	}
	if n := e.tasks(); n != 1 {
		t.Fatalf("%d tasks, want 1", n)
	}
}

// A throttle is counted once: by the Producer, as producer serve wires it
// (one sink for the API's and the Producer's decisions here). The API
// counted it again.
func TestThrottledIs429(t *testing.T) {
	t.Parallel()
	var rec oncetest.Recorder
	e := newEnv(t, func(o *api.Options) {
		o.Observer = rec.Observe
		o.Producer = oncetest.NewProducer(t, o.Redis, nil, dedup.ProducerOptions{Observer: rec.Observe})
	})
	accepted(t, e.post(paymentPath, paymentBody("pmt-a", "acct-9", 1000), ""), http.StatusAccepted)
	r := e.post(paymentPath, paymentBody("pmt-b", "acct-9", 1000), "")
	p := problem(t, r, http.StatusTooManyRequests)
	if ra := r.Header.Get("Retry-After"); ra == "" || ra == "0" || len(ra) > 2 {
		t.Errorf("Retry-After %q, want 1..60 seconds", ra)
	}
	if p.Key != "payment:charge/pmt-b" || p.RetryAfter < 1 || p.RetryAfter > 60 {
		t.Errorf("problem %+v", p)
	}
	if n := rec.Count("throttled"); n != 1 {
		t.Errorf("%d throttled decisions observed, want 1", n)
	}
	if n := e.tasks(); n != 1 {
		t.Fatalf("%d tasks, want 1", n)
	}
}

// Every refusal is a problem document and enqueues nothing.
func TestBadRequestsEnqueueNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	good := paymentBody("pmt-x", "acct-1", 100)
	for _, c := range []struct {
		name   string
		r      req
		status int
	}{
		{"no token", req{path: paymentPath, body: good, header: map[string]string{"Authorization": ""}}, 401},
		{"wrong token", req{path: paymentPath, body: good, header: map[string]string{"Authorization": "Bearer nope"}}, 401},
		{"basic auth", req{path: paymentPath, body: good, header: map[string]string{"Authorization": "Basic dGVzdC10b2tlbjo="}}, 401},
		{"token prefix", req{path: paymentPath, body: good, header: map[string]string{"Authorization": "Bearer test-toke"}}, 401},
		{"jobs without token", req{method: "GET", path: "/v1/jobs/payment:charge%2Fpmt-x", header: map[string]string{"Authorization": ""}}, 401},
		{"unknown route", req{path: "/v1/refunds", body: good}, 404},
		{"wrong method", req{method: "GET", path: paymentPath}, 405},
		{"text/plain", req{path: paymentPath, body: good, header: map[string]string{"Content-Type": "text/plain"}}, 415},
		{"no content type", req{path: paymentPath, body: good, header: map[string]string{"Content-Type": ""}}, 415},
		{"latin-1", req{path: paymentPath, body: good, header: map[string]string{"Content-Type": "application/json; charset=latin1"}}, 415},
		{"oversized", req{path: paymentPath, body: `{"payment_id":"` + strings.Repeat("x", 5000) + `"}`}, 413},
		{"malformed", req{path: paymentPath, body: `{"payment_id":`}, 400},
		{"not an object", req{path: paymentPath, body: `[1,2]`}, 400},
		{"empty", req{path: paymentPath, body: ``}, 400},
		{"unknown field", req{path: paymentPath, body: `{"payment_id":"p","account":"a","amount":1,"currency":"EUR","admin":true}`}, 400},
		{"trailing data", req{path: paymentPath, body: good + `{}`}, 400},
		{"amount as string", req{path: paymentPath, body: `{"payment_id":"p","account":"a","amount":"100","currency":"EUR"}`}, 400},
		{"fractional amount", req{path: paymentPath, body: `{"payment_id":"p","account":"a","amount":1.5,"currency":"EUR"}`}, 400},
		{"negative amount", req{path: paymentPath, body: paymentBody("p", "a", -5)}, 400},
		{"bad currency", req{path: paymentPath, body: `{"payment_id":"p","account":"a","amount":1,"currency":"euro"}`}, 400},
		{"payment id with brace", req{path: paymentPath, body: paymentBody("p{1}", "a", 1)}, 400},
		{"email without to", req{path: emailPath, body: `{"subject":"s","body":"b"}`}, 400},
		{"email header injection", req{path: emailPath, body: `{"to":"a@example.com","subject":"x\r\nBcc: b@example.com","body":"b"}`}, 400},
		{"scan traversal", req{path: scanPath, body: `{"path":"../etc/passwd"}`}, 400},
		{"scan absolute", req{path: scanPath, body: `{"path":"/etc/passwd"}`}, 400},
		{"scan bad mode", req{path: scanPath, body: `{"path":"a","mode":"quick"}`}, 400},
		{"key too long", req{path: paymentPath, body: good, header: map[string]string{"Idempotency-Key": strings.Repeat("k", 256)}}, 400},
		{"key with control", req{path: paymentPath, body: good, header: map[string]string{"Idempotency-Key": "a\tb"}}, 400},
		{"keys differ", req{path: paymentPath, body: good, header: map[string]string{"Idempotency-Key": "a", "X-Idempotency-Key": "b"}}, 400},
		{"empty quoted key", req{path: paymentPath, body: good, header: map[string]string{"Idempotency-Key": `""`}}, 400},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := e.doT(t, c.r)
			p := problem(t, r, c.status)
			if c.status == 401 && r.Header.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
			if p.Detail == "" && c.status != 401 {
				t.Errorf("problem without detail: %+v", p)
			}
		})
	}
	if n := e.tasks(); n != 0 {
		t.Fatalf("%d tasks enqueued by refused requests", n)
	}
	keys, err := e.rdb.Keys(t.Context(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 0 {
		t.Fatalf("refused requests wrote to Redis: %v", keys)
	}
}

func TestNewValidatesOptions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for name, o := range map[string]api.Options{
		"no producer": {},
		"empty token": {Producer: oncetest.NewProducer(t, e.rdb, e.jobs, dedup.ProducerOptions{}), Store: e.replays, Redis: e.rdb, Tokens: []string{""}},
		"empty secret": {Producer: oncetest.NewProducer(t, e.rdb, e.jobs, dedup.ProducerOptions{}), Store: e.replays, Redis: e.rdb,
			WebhookSecrets: map[string][]string{"a": {""}}},
		"source tasks refuse": {Producer: oncetest.NewProducer(t, e.rdb, e.jobs, dedup.ProducerOptions{}), Store: e.replays, Redis: e.rdb,
			WebhookSecrets: map[string][]string{"Upper.Case": {"s"}}},
	} {
		if _, err := api.New(o); err == nil {
			t.Errorf("%s: New accepted %+v", name, o)
		}
	}
}

// Without tokens the bearer routes are open (config allows that on loopback only).
func TestNoTokensMeansOpen(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *api.Options) { o.Tokens = nil })
	r := e.do(req{path: paymentPath, body: paymentBody("pmt-open", "acct-1", 100), header: map[string]string{"Authorization": ""}})
	accepted(t, r, http.StatusAccepted)
}
