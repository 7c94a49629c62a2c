package api_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest"
	"github.com/onceq/onceq/internal/api"
	"github.com/onceq/onceq/internal/testenv"
	"github.com/onceq/onceq/tasks"
)

// The documented openssl recipe gives this value; Sign must agree:
//
//	printf '%s.%s' 1700000000 '{"id":"evt_1","type":"user.created"}' |
//	  openssl dgst -sha256 -hmac whsec-test -r
func TestSignMatchesOpenSSL(t *testing.T) {
	t.Parallel()
	got := testenv.Sign("whsec-test", time.Unix(1700000000, 0), []byte(`{"id":"evt_1","type":"user.created"}`))
	want := "t=1700000000,v1=70b0b00b6e9700e3c3d2b71f8dad14ce10c2cea940e00631b18bdbccf0140e21"
	if got != want {
		t.Fatalf("Sign = %q, want %q", got, want)
	}
}

func TestWebhookRedeliveredThreeTimesEnqueuesOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var first reply
	for attempt := 1; attempt <= 3; attempt++ {
		e.advance(7 * time.Second) // each delivery is signed afresh
		r := e.webhook(eventBody("evt_100", attempt), "delivery-evt_100")
		if attempt == 1 {
			a := accepted(t, r, http.StatusAccepted)
			if a.Key != "webhook:process/acme:evt_100" || a.Queue != "default" {
				t.Fatalf("accepted %+v", a)
			}
			first = r
			continue
		}
		if r.Status != http.StatusAccepted || r.Header.Get(api.ReplayedHeader) != "true" || !bytes.Equal(r.Body, first.Body) {
			t.Fatalf("delivery %d: %d %s (replayed %q), want the first response replayed",
				attempt, r.Status, r.Body, r.Header.Get(api.ReplayedHeader))
		}
	}
	wh := e.payloadOf(t)
	if wh.Source != source || wh.EventID != "evt_100" || wh.Type != "user.created" || wh.Attempt != 1 || wh.ReceivedAt == "" {
		t.Fatalf("payload %+v", wh)
	}
}

func TestWebhookSignatures(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	body := eventBody("evt_sig", 0)
	now := e.clock()
	good := testenv.Sign(secret, now, []byte(body))
	v1 := good[strings.Index(good, "v1=")+3:]
	ts := strconv.FormatInt(now.Unix(), 10)
	for _, c := range []struct{ name, sig string }{
		{"missing", ""},
		{"forged with another secret", testenv.Sign("not-the-secret", now, []byte(body))},
		{"another body", testenv.Sign(secret, now, []byte(eventBody("evt_other", 0)))},
		{"stale", testenv.Sign(secret, now.Add(-6*time.Minute), []byte(body))},
		{"future", testenv.Sign(secret, now.Add(6*time.Minute), []byte(body))},
		{"timestamp swapped", "t=" + strconv.FormatInt(now.Unix()-1, 10) + ",v1=" + v1},
		{"no timestamp", "v1=" + v1},
		{"no v1", "t=" + ts},
		{"v0 only", "t=" + ts + ",v0=" + v1},
		{"bad hex", "t=" + ts + ",v1=zz" + v1[2:]},
		{"truncated", "t=" + ts + ",v1=" + v1[:32]},
		{"two timestamps", "t=" + ts + ",t=" + ts + ",v1=" + v1},
		{"garbage", "sha256=" + v1},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := e.doT(t, req{path: "/v1/webhooks/" + source, body: body, header: map[string]string{
				"Idempotency-Key": "k-" + c.name, "Authorization": "", api.SignatureHeader: c.sig}})
			problem(t, r, http.StatusUnauthorized)
		})
	}
	// A bearer token is no substitute for the signature.
	r := e.do(req{path: "/v1/webhooks/" + source, body: body, header: map[string]string{"Idempotency-Key": "k-bearer"}})
	problem(t, r, http.StatusUnauthorized)
	if n := e.tasks(); n != 0 {
		t.Fatalf("%d tasks enqueued by unauthenticated webhooks", n)
	}

	// Rotation: the right signature among others is enough; unknown schemes are ignored.
	rotating := "t=" + ts + ",v1=" + strings.Repeat("ab", 32) + ",v2=whatever,v1=" + v1
	r = e.do(req{path: "/v1/webhooks/" + source, body: body, header: map[string]string{
		"Idempotency-Key": "k-rotating", "Authorization": "", api.SignatureHeader: rotating}})
	accepted(t, r, http.StatusAccepted)
	if n := e.tasks(); n != 1 {
		t.Fatalf("%d tasks, want 1", n)
	}
}

func TestWebhookRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	signed := func(path, body string, h map[string]string) req {
		hd := map[string]string{"Authorization": "", api.SignatureHeader: testenv.Sign(secret, e.clock(), []byte(body))}
		for k, v := range h {
			hd[k] = v
		}
		return req{path: path, body: body, header: hd}
	}
	good := eventBody("evt_r", 0)
	for _, c := range []struct {
		name   string
		r      req
		status int
	}{
		{"unknown source", signed("/v1/webhooks/other", good, map[string]string{"Idempotency-Key": "k"}), 401},
		{"oversized", signed("/v1/webhooks/"+source, `{"id":"e","type":"t","data":"`+strings.Repeat("x", 5000)+`"}`,
			map[string]string{"Idempotency-Key": "k"}), 413},
		{"form encoded", signed("/v1/webhooks/"+source, good, map[string]string{"Idempotency-Key": "k",
			"Content-Type": "application/x-www-form-urlencoded"}), 415},
		{"malformed", signed("/v1/webhooks/"+source, `{"id":`, map[string]string{"Idempotency-Key": "k"}), 400},
		{"not an object", signed("/v1/webhooks/"+source, `["id","e"]`, map[string]string{"Idempotency-Key": "k"}), 400},
		{"trailing data", signed("/v1/webhooks/"+source, `{"id":"e","type":"t"} {}`, map[string]string{"Idempotency-Key": "k"}), 400},
		{"attempt as string", signed("/v1/webhooks/"+source, `{"id":"e","type":"t","attempt":"2"}`, map[string]string{"Idempotency-Key": "k"}), 400},
		{"no event id", signed("/v1/webhooks/"+source, `{"type":"t"}`, map[string]string{"Idempotency-Key": "k"}), 400},
		{"no type", signed("/v1/webhooks/"+source, `{"id":"e"}`, map[string]string{"Idempotency-Key": "k"}), 400},
	} {
		t.Run(c.name, func(t *testing.T) { problem(t, e.doT(t, c.r), c.status) })
	}
	if n := e.tasks(); n != 0 {
		t.Fatalf("%d tasks, want 0", n)
	}
}

// Another event under a delivery key already used is a 422, not a replay.
func TestWebhookKeyReusedForAnotherEvent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	accepted(t, e.webhook(eventBody("evt_a", 1), "dk-1"), http.StatusAccepted)
	problem(t, e.webhook(eventBody("evt_b", 1), "dk-1"), http.StatusUnprocessableEntity)
	if n := e.tasks(); n != 1 {
		t.Fatalf("%d tasks, want 1", n)
	}
}

// An event whose data is malformed for its route is refused at the door,
// before its event id is taken: the corrected resend of the same event is
// accepted, where a 202 for the bad one would have had the worker archive
// it and the id refuse the fix for the unique window. (Data that is well
// formed but lacks what a follow-up needs is accepted: see tasks.)
func TestWebhookInvalidDataRefusedThenCorrectedAccepted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	bad := `{"id":"evt_fix","type":"user.created","data":{"email":7}}`
	p := problem(t, e.webhook(bad, "delivery-fix"), http.StatusBadRequest)
	if p.Type != api.ProblemType+"invalid-payload" || !strings.Contains(p.Detail, "email") {
		t.Fatalf("problem %+v, want invalid-payload naming email", p)
	}
	if n := e.tasks(); n != 0 {
		t.Fatalf("%d tasks after a refused event, want 0", n)
	}
	e.advance(time.Second)
	fixed := `{"id":"evt_fix","type":"user.created","data":{"user_id":"u1","email":"ada@example.com"}}`
	a := accepted(t, e.webhook(fixed, "delivery-fix"), http.StatusAccepted)
	if a.Decision != dedup.Enqueued || a.Key != "webhook:process/"+source+":evt_fix" {
		t.Fatalf("corrected resend: %+v", a)
	}
	// Event types no route takes are acknowledged by the worker, so their data
	// is not the door's business.
	accepted(t, e.webhook(`{"id":"evt_other","type":"invoice.paid","data":[1]}`, "delivery-other"), http.StatusAccepted)
}

// The sender's body is the sender's: members onceq does not read (the seed's
// "event", a "source" that is not the path's) are accepted and kept whole.
func TestWebhookKeepsTheSendersBody(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	body := `{"id":"evt_seed","type":"order.paid","event":"order.paid","source":"evil","data":{"order":7},"livemode":false}`
	a := accepted(t, e.webhook(body, ""), http.StatusAccepted)
	if a.Key != "webhook:process/"+source+":evt_seed" {
		t.Fatalf("accepted %+v", a)
	}
	p := e.pending("default")
	if len(p) != 1 {
		t.Fatalf("%d pending tasks, want 1", len(p))
	}
	var wh tasks.Webhook
	if err := json.Unmarshal(p[0].Payload, &wh); err != nil {
		t.Fatal(err)
	}
	if wh.Source != source || wh.Type != "order.paid" || string(wh.Body) != body {
		t.Fatalf("payload %+v, want the source from the path and the body kept as sent", wh)
	}
}

// The seed sends its webhook as many senders do: the type under "event",
// the retry key in X-Idempotency-Key, data without what a welcome email
// needs. It is accepted (the worker records why nothing followed), its
// retry replayed, and a resend without the header a duplicate.
func TestWebhookAsTheSeedSendsIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	body := `{"id":"evt_123","event":"user.created","data":{"name":"Alice"}}`
	send := func(key string) reply {
		h := map[string]string{api.SignatureHeader: testenv.Sign(secret, e.clock(), []byte(body))}
		if key != "" {
			h["X-Idempotency-Key"] = key
		}
		return e.do(req{path: "/v1/webhooks/" + source, body: body, header: h})
	}
	first := send("wh-evt_123")
	a := accepted(t, first, http.StatusAccepted)
	if a.Decision != dedup.Enqueued || a.Key != "webhook:process/"+source+":evt_123" {
		t.Fatalf("accepted %+v", a)
	}
	if wh := e.payloadOf(t); wh.Type != "user.created" {
		t.Fatalf("type %q, want user.created read from \"event\"", wh.Type)
	}
	retry := send("wh-evt_123")
	if retry.Status != http.StatusAccepted || retry.Header.Get(api.ReplayedHeader) != "true" || !bytes.Equal(retry.Body, first.Body) {
		t.Fatalf("retry: %d %s, want the first answer replayed", retry.Status, retry.Body)
	}
	if again := accepted(t, send(""), http.StatusOK); again.Decision != dedup.Duplicate {
		t.Fatalf("resend without a key: %+v, want a duplicate", again)
	}
	if n := e.tasks(); n != 1 {
		t.Fatalf("%d tasks, want 1", n)
	}
	// An event with neither is refused, the answer naming both.
	p := problem(t, e.webhook(`{"id":"evt_124","data":{}}`, ""), http.StatusBadRequest)
	if !strings.Contains(p.Detail, `"type", or "event"`) {
		t.Fatalf("problem %+v, want it to name both fields", p)
	}
}

// An event an operator enqueued (a batch file, the library) and then
// delivered by its sender is a duplicate the sender is told with a 2xx: a
// non-2xx would make it retry and in the end disable the endpoint. Nothing
// of the operator's job is shown.
func TestWebhookEnqueuedByOperatorIsDuplicate(t *testing.T) {
	t.Parallel()
	e := newEnv(t, twoClients)
	p := oncetest.NewProducer(t, e.rdb, e.jobs, dedup.ProducerOptions{})
	job := tasks.Webhooks.Job(tasks.Webhook{Source: source, EventID: "evt_op", Type: "user.created",
		Data: json.RawMessage(`{"user_id":"u1","email":"ada@example.com"}`)})
	if out, err := p.Enqueue(t.Context(), job); err != nil || out.Decision != dedup.Enqueued {
		t.Fatalf("the operator's enqueue: %+v %v", out, err)
	}
	r := e.webhook(eventBody("evt_op", 1), "")
	if a := accepted(t, r, http.StatusOK); a.Decision != dedup.Duplicate || a.TaskID != "" || a.State != "" {
		t.Fatalf("the sender's delivery: %+v", a)
	}
	if n := e.tasks(); n != 1 {
		t.Fatalf("%d tasks, want 1", n)
	}
}
