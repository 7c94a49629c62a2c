package api_test

import (
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/tasks"
	"github.com/onceq/onceq/tasks/gateway"
)

// The seed's challenge, over HTTP: a payment submitted twice, the same charge
// under another id within 60 s, a webhook delivered three times, and the
// read endpoint answering "processed" with the result once a worker ran it.
func TestSeedChallengeOverHTTP(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const id = "pmt-20260628-001"
	body := paymentBody(id, "acct-7781", 129900)

	first := accepted(t, e.post(paymentPath, body, ""), http.StatusAccepted)
	if first.Key != "payment:charge/"+id || first.TaskID != taskIDOf(t, first.Key) {
		t.Fatalf("first submission %+v", first)
	}
	second := accepted(t, e.post(paymentPath, body, ""), http.StatusOK)
	if second.Decision != dedup.Duplicate || second.TaskID != first.TaskID || !strings.Contains(second.Reason, "already") {
		t.Fatalf("second submission %+v, want a duplicate of %s", second, first.TaskID)
	}

	r := e.post(paymentPath, paymentBody("pmt-20260628-002", "acct-7781", 129900), "")
	problem(t, r, http.StatusTooManyRequests)
	if s, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || s < 1 || s > 60 {
		t.Fatalf("Retry-After %q, want 1..60", r.Header.Get("Retry-After"))
	}

	for attempt := 1; attempt <= 3; attempt++ {
		r := e.webhook(eventBody("evt_7781", attempt), "wh-7781")
		if r.Status != http.StatusAccepted {
			t.Fatalf("webhook delivery %d: %d %s", attempt, r.Status, r.Body)
		}
	}
	if p := e.pending("default"); len(p) != 1 || p[0].Type != tasks.TypeWebhook {
		t.Fatalf("pending webhook tasks %v, want 1", p)
	}
	if p := e.pending("critical"); len(p) != 1 || p[0].ID != first.TaskID {
		t.Fatalf("pending payments %v, want only %s", p, first.TaskID)
	}

	// A worker runs the payment: the real middleware and handler, charging
	// the built-in gateway.
	server := &gateway.Server{}
	gw := httptest.NewServer(server)
	t.Cleanup(gw.Close)
	catalog, err := tasks.NewCatalog(tasks.Windows{})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := dedup.NewMiddleware(e.jobs, dedup.MiddlewareOptions{Catalog: catalog.Catalog})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mw.Shutdown(t.Context()) })
	info, err := e.insp.GetTaskInfo("critical", first.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	h := mw.Wrap(tasks.PaymentHandler{Gateway: &gateway.Client{URL: gw.URL, HTTP: gw.Client()}})
	// A real delivery carries the key as its task id, which only asynq's
	// server can put in the context: here it goes in the header instead.
	k, err := dedup.ParseKey(info.ID)
	if err != nil {
		t.Fatal(err)
	}
	hdr := maps.Clone(info.Headers)
	hdr["onceq-key"] = k.String()
	task := asynq.NewTaskWithHeaders(info.Type, info.Payload, hdr)
	for range 2 { // redelivered: the second run is acknowledged as a duplicate
		if err := h.ProcessTask(t.Context(), task); err != nil {
			t.Fatal(err)
		}
	}
	if n := server.Charges(first.Key); n != 1 {
		t.Fatalf("%d charges for %s, want 1", n, first.Key)
	}

	j := e.job(first.Key, http.StatusOK)
	if !j.Processed || j.State != "done" || j.CompletedAt == nil || j.Attempts != 1 {
		t.Fatalf("job %+v, want processed", j)
	}
	var charge tasks.Charge
	b, _ := json.Marshal(j.Result)
	if err := json.Unmarshal(b, &charge); err != nil || charge.ChargeID == "" || charge.Amount != 129900 || charge.Currency != "EUR" {
		t.Fatalf("result %s (%v), want the charge", b, err)
	}

	// Submitted again after processing: still a duplicate, now with the result.
	third := accepted(t, e.post(paymentPath, body, ""), http.StatusOK)
	if third.State != dedup.StatusDone || third.Result == nil || !strings.Contains(third.Reason, "already processed") {
		t.Fatalf("third submission %+v", third)
	}
}
