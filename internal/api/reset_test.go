package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest"
	"github.com/onceq/onceq/dedup/storage"
	"github.com/onceq/onceq/internal/api"
	"github.com/onceq/onceq/tasks"
)

const opsToken = "ops-token-0123456789"

// events collects what an Observer hears.
type events struct {
	mu  sync.Mutex
	evs []dedup.Event
}

func (es *events) observe(_ context.Context, ev dedup.Event) {
	es.mu.Lock()
	defer es.mu.Unlock()
	es.evs = append(es.evs, ev)
}

func (es *events) all() []dedup.Event {
	es.mu.Lock()
	defer es.mu.Unlock()
	return slices.Clone(es.evs)
}

// withOperator adds the clients "ops", an operator, and "audit", read-all,
// and gives the Producer an Observer that collects its events in producer.
func withOperator(t *testing.T, producer *events) func(*api.Options) {
	return func(o *api.Options) {
		o.Clients = append(o.Clients, api.Client{Name: "ops", Token: opsToken, Operator: true},
			api.Client{Name: "audit", Token: "audit-token-0123456789", ReadAll: true})
		jobs, err := dedup.NewRedisStore(o.Redis, storage.Options{})
		if err != nil {
			t.Fatal(err)
		}
		o.Producer = oncetest.NewProducer(t, o.Redis, jobs, dedup.ProducerOptions{Observer: producer.observe})
	}
}

// reset sends DELETE /v1/jobs/{key} with query (e.g. "?running=finish")
// under bearer.
func (e *env) reset(key, query, bearer string) reply {
	e.t.Helper()
	return e.do(req{method: http.MethodDelete, path: "/v1/jobs/" + url.PathEscape(key) + query,
		header: map[string]string{"Authorization": "Bearer " + bearer}})
}

func decodeJob(t *testing.T, r reply) api.Job {
	t.Helper()
	if r.Status != http.StatusOK {
		t.Fatalf("status %d, want 200: %s", r.Status, r.Body)
	}
	var j api.Job
	dec := json.NewDecoder(bytes.NewReader(r.Body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		t.Fatalf("job %s: %v", r.Body, err)
	}
	return j
}

// An operator frees a done key: the answer is the job as it was, the key
// is free at once (the same payment is enqueued again), the Producer's
// Observer hears the reset, and the reset job's owner no longer reads
// the key. A second reset finds nothing.
func TestResetDone(t *testing.T) {
	var evs events
	e := newEnv(t, withOperator(t, &evs))
	pay := paymentBody("pmt-r1", "acct-r1", 100)
	a := accepted(t, e.post(paymentPath, pay, ""), http.StatusAccepted)
	k, _ := dedup.ParseKey(a.Key)
	c, err := e.jobs.Claim(t.Context(), k, "", time.Minute, "")
	if err != nil || c.Outcome != dedup.Acquired {
		t.Fatalf("claim %+v %v", c, err)
	}
	if err := e.jobs.Complete(t.Context(), c.Hold, []byte(`{"id":"ch_1"}`), 0); err != nil {
		t.Fatal(err)
	}
	accepted(t, e.post(paymentPath, pay, ""), http.StatusOK) // a duplicate while done

	j := decodeJob(t, e.reset(a.Key, "", opsToken))
	if j.State != "done" || !j.Processed || string(j.Result) != `{"id":"ch_1"}` {
		t.Fatalf("reset answered %+v, want the done job", j)
	}
	reset := 0
	for _, ev := range evs.all() {
		if ev.Op == "reset" && ev.Outcome == storage.Reset && ev.Key == k {
			reset++
		}
	}
	if reset != 1 {
		t.Fatalf("the Producer's Observer heard %d resets of %s, want 1: %+v", reset, k, evs.all())
	}
	problem(t, e.reset(a.Key, "", opsToken), http.StatusNotFound)

	// Free: the same payment is a new job. Enqueued by library code (the
	// CLI's way in), it is no client's: the reset job's owner record went
	// with it, so the client that enqueued that one does not read this one.
	p := oncetest.NewProducer(t, e.rdb, e.jobs, dedup.ProducerOptions{})
	out, err := p.Enqueue(t.Context(), tasks.Payments.Job(tasks.Payment{PaymentID: "pmt-r1", Account: "acct-r1", Amount: 100, Currency: "EUR"}))
	if err != nil || out.Decision != dedup.Enqueued || out.Key != a.Key {
		t.Fatalf("after the reset: %+v %v, want enqueued as %s", out, err, a.Key)
	}
	e.job(a.Key, http.StatusNotFound)
	if j := decodeJob(t, e.do(req{method: http.MethodGet, path: "/v1/jobs/" + url.PathEscape(a.Key),
		header: map[string]string{"Authorization": "Bearer " + opsToken}})); j.State != "pending" || j.Incarnation != 2 {
		t.Fatalf("the next job %+v, want pending, incarnation 2", j)
	}
}

// Only an operator (or the one caller of a shared scope) resets: other
// clients, read-all ones included, get 403 whether the key exists or not,
// so the answer tells nothing of it; no token is 401. Nothing changes.
func TestResetRefused(t *testing.T) {
	var evs events
	e := newEnv(t, withOperator(t, &evs))
	a := accepted(t, e.post(paymentPath, paymentBody("pmt-r2", "acct-r2", 100), ""), http.StatusAccepted)
	for _, key := range []string{a.Key, "payment:charge/never-seen", "malformed"} {
		for _, bearer := range []string{token, "audit-token-0123456789"} {
			if p := problem(t, e.reset(key, "", bearer), http.StatusForbidden); p.Type != api.ProblemType+"operator-only" {
				t.Fatalf("refused reset: %+v", p)
			}
		}
		r := e.do(req{method: http.MethodDelete, path: "/v1/jobs/" + url.PathEscape(key), header: map[string]string{"Authorization": ""}})
		problem(t, r, http.StatusUnauthorized)
		if r.Header.Get("WWW-Authenticate") == "" {
			t.Fatal("401 without a challenge")
		}
	}
	if j := e.job(a.Key, http.StatusOK); j.State != "pending" {
		t.Fatalf("job after refused resets: %+v", j)
	}
	if got := evs.all(); len(got) != 1 || got[0].Op == "reset" {
		t.Fatalf("producer events %+v, want the enqueue only", got)
	}
	// The operator's own mistakes.
	problem(t, e.reset("malformed", "", opsToken), http.StatusBadRequest)
	problem(t, e.reset(a.Key, "?running=yes", opsToken), http.StatusBadRequest)
}

// A running job refuses the reset with 409 and nothing changes;
// ?running=finish frees the key, and the run's completion is refused as a
// lost lease. The task id works as the key.
func TestResetRunning(t *testing.T) {
	var evs events
	e := newEnv(t, withOperator(t, &evs))
	a := accepted(t, e.post(paymentPath, paymentBody("pmt-r3", "acct-r3", 100), ""), http.StatusAccepted)
	k, _ := dedup.ParseKey(a.Key)
	c, err := e.jobs.Claim(t.Context(), k, "", time.Minute, "")
	if err != nil || c.Outcome != dedup.Acquired {
		t.Fatalf("claim %+v %v", c, err)
	}
	p := problem(t, e.reset(a.TaskID, "", opsToken), http.StatusConflict)
	if p.Type != api.ProblemType+"job-running" || p.Key != a.Key {
		t.Fatalf("reset of a running job: %+v", p)
	}
	// (Its task is still pending in asynq: the claim stands for a worker's.)
	if st, err := e.jobs.Status(t.Context(), k); err != nil || st.State != dedup.StatusRunning {
		t.Fatalf("refused reset changed the record: %+v %v", st, err)
	}
	if j := decodeJob(t, e.reset(a.TaskID, "?running=finish", opsToken)); j.Key != a.Key || j.Attempts != 1 || j.Processed {
		t.Fatalf("reset letting it finish answered %+v, want the claimed job", j)
	}
	if err := e.jobs.Complete(t.Context(), c.Hold, []byte(`{}`), 0); !errors.Is(err, storage.ErrLeaseLost) {
		t.Fatalf("completion after the reset: %v, want ErrLeaseLost", err)
	}
	if st, err := e.jobs.Status(t.Context(), k); err != nil || st.State != dedup.StatusUnknown {
		t.Fatalf("record after the unrecorded finish: %+v %v, want none", st, err)
	}
}

// With one client, the caller shares the CLI's scope, and resets as the
// CLI does.
func TestResetSharedScope(t *testing.T) {
	e := newEnv(t, func(o *api.Options) { o.Tokens = []string{token} })
	a := accepted(t, e.post(paymentPath, paymentBody("pmt-r4", "acct-r4", 100), ""), http.StatusAccepted)
	if j := decodeJob(t, e.reset(a.Key, "", token)); j.State != "pending" {
		t.Fatalf("reset answered %+v, want the pending job", j)
	}
	if n := len(e.pending("critical")); n != 0 {
		t.Fatalf("%d pending tasks after the reset of the only one", n)
	}
}
