package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/onceq/onceq/internal/api"
	"github.com/onceq/onceq/internal/testenv"
)

// A payment id reused with other content is a conflict: 422 problem+json
// naming the key, never the other payment's state or result, and no job.
func TestReusedPaymentIDIsAConflict(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	accepted(t, e.post(paymentPath, paymentBody("pmt-20260628-001", "acct-42", 12500), ""), http.StatusAccepted)
	r := e.post(paymentPath, paymentBody("pmt-20260628-001", "acct-other", 999999), "")
	p := problem(t, r, http.StatusUnprocessableEntity)
	if !strings.HasSuffix(p.Type, "job-key-conflict") || p.Key != "payment:charge/pmt-20260628-001" {
		t.Fatalf("problem %+v", p)
	}
	if strings.Contains(string(r.Body), "charge_id") || strings.Contains(string(r.Body), "pending") {
		t.Fatalf("the conflict reports the other job: %s", r.Body)
	}
	// The refused payment left no rate window on its account and amount.
	accepted(t, e.post(paymentPath, paymentBody("pmt-20260628-002", "acct-other", 999999), ""), http.StatusAccepted)
	if n := e.tasks(); n != 2 {
		t.Fatalf("%d tasks, want 2", n)
	}
}

// The webhook key comes from the signed body: a captured body re-sent
// under new Idempotency-Keys (or none) is the same job, and two sources
// whose events share an id never collide.
func TestWebhookKeyedBySignedEventID(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *api.Options) {
		o.WebhookSecrets["globex"] = []string{"whsec-globex"}
		o.WebhookIDFields = map[string]string{"globex": "event_id"}
	})
	body := eventBody("evt_300", 1)
	first := accepted(t, e.webhook(body, "delivery-1"), http.StatusAccepted)
	if first.Key != "webhook:process/acme:evt_300" {
		t.Fatalf("key %s", first.Key)
	}
	for _, key := range []string{"delivery-2", "delivery-3", "delivery-4", ""} {
		again := accepted(t, e.webhook(body, key), http.StatusOK)
		if again.Decision != "duplicate" || again.Key != first.Key {
			t.Fatalf("re-sent with key %q: %+v", key, again)
		}
	}
	globex := `{"event_id":"evt_300","type":"user.created","data":{"user_id":"u9","email":"g@example.com"}}`
	r := e.do(req{path: "/v1/webhooks/globex", body: globex, header: map[string]string{"Authorization": "",
		api.SignatureHeader: testenv.Sign("whsec-globex", e.clock(), []byte(globex))}})
	if a := accepted(t, r, http.StatusAccepted); a.Key != "webhook:process/globex:evt_300" {
		t.Fatalf("globex event: %+v", a)
	}
	if n := e.tasks(); n != 2 {
		t.Fatalf("%d tasks, want 2", n)
	}
}

// Routes come from the catalog: the fifth type is served without an API edit.
func TestCatalogRoutes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := accepted(t, e.post("/v1/sms", `{"to":"+4915112345678","body":"Your code is 1234"}`, "otp-1"), http.StatusAccepted)
	// The header is the client's: the job id is scoped to the caller.
	if a.Key != "sms:send/"+api.DerivedPrincipal(token)+":otp-1" {
		t.Fatalf("sms %+v", a)
	}
	problem(t, e.post("/v1/sms", `{"to":"12","body":"x"}`, ""), http.StatusBadRequest)
}

// The replay fingerprint leaves out the type's volatile fields: a retry
// with a new trace id is the same request, replayed, not a 422.
func TestReplayIgnoresVolatileFields(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	first := e.post(emailPath, `{"to":"a@example.com","subject":"s","body":"b","trace_id":"t-1"}`, "mail-1")
	accepted(t, first, http.StatusAccepted)
	again := e.post(emailPath, `{"to":"a@example.com","subject":"s","body":"b","trace_id":"t-2"}`, "mail-1")
	if again.Status != http.StatusAccepted || again.Header.Get(api.ReplayedHeader) != "true" {
		t.Fatalf("retry with another trace id: %d %s", again.Status, again.Body)
	}
}
