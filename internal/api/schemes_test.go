package api_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stripe/stripe-go/v84/webhook"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/api"
	"github.com/onceq/onceq/internal/testenv"
	"github.com/onceq/onceq/tasks"
)

// schemeEnv is an env whose only webhook source, src, signs with sc.
func schemeEnv(t *testing.T, src string, sc api.Scheme, secrets ...string) *env {
	t.Helper()
	return newEnv(t, func(o *api.Options) {
		o.WebhookSecrets = map[string][]string{src: secrets}
		o.WebhookSchemes = map[string]api.Scheme{src: sc}
	})
}

// deliver posts body to the source with the sender's headers only.
func (e *env) deliver(t testing.TB, src, body string, h map[string]string) reply {
	t.Helper()
	hd := map[string]string{"Authorization": ""}
	for k, v := range h {
		hd[k] = v
	}
	return e.doT(t, req{path: "/v1/webhooks/" + src, body: body, header: hd})
}

// payloadOf decodes the one pending webhook task.
func (e *env) payloadOf(t *testing.T) tasks.Webhook {
	t.Helper()
	p := e.pending("default")
	if len(p) != 1 {
		t.Fatalf("%d pending tasks, want 1", len(p))
	}
	var wh tasks.Webhook
	if err := json.Unmarshal(p[0].Payload, &wh); err != nil {
		t.Fatal(err)
	}
	return wh
}

// A Stripe event as Stripe sends it, of an API version stripe-go does not pin.
const stripeEvent = `{
  "id": "evt_1NG8Du2eZvKYlo2CUI79vXWy",
  "object": "event",
  "api_version": "2019-02-19",
  "created": 1686089970,
  "data": {
    "object": {
      "id": "cus_NffrFeUfNV2Hib",
      "object": "customer",
      "email": "jennyrosen@example.com",
      "livemode": false,
      "metadata": {}
    },
    "previous_attributes": null
  },
  "livemode": false,
  "pending_webhooks": %d,
  "request": {"id": "req_Wx3HvVDQwKVmVY", "idempotency_key": "1ad8a2d0-1b44-4d8e-b14f-8e5a4d5b1e7c"},
  "type": "customer.created"
}`

func stripeBody(pending int) string { return fmt.Sprintf(stripeEvent, pending) }

// compact is body as the payload keeps it: every member, in order, without
// the sender's whitespace.
func compact(t *testing.T, body string) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(body)); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func stripeHeader(secret, body string, at time.Time) map[string]string {
	sp := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: []byte(body), Secret: secret, Timestamp: at})
	return map[string]string{"Stripe-Signature": sp.Header, "Content-Type": "application/json; charset=utf-8",
		"User-Agent": "Stripe/1.0 (+https://stripe.com/docs/webhooks)"}
}

func TestStripeWebhook(t *testing.T) {
	t.Parallel()
	const stripeSecret = "whsec_test_stripe_0123456789"
	e := schemeEnv(t, "stripe", api.SchemeStripe, "whsec_old_rotating", stripeSecret)
	body := stripeBody(1)
	a := accepted(t, e.deliver(t, "stripe", body, stripeHeader(stripeSecret, body, e.clock())), http.StatusAccepted)
	if a.Key != "webhook:process/stripe:evt_1NG8Du2eZvKYlo2CUI79vXWy" || a.Decision != dedup.Enqueued {
		t.Fatalf("accepted %+v, want the key from the body's id", a)
	}
	wh := e.payloadOf(t)
	if wh.Type != "customer.created" || string(wh.Body) != compact(t, body) {
		t.Fatalf("payload %+v, want type customer.created and the body as sent", wh)
	}

	// Stripe's retry: signed afresh, pending_webhooks counted down.
	e.advance(time.Minute)
	retry := stripeBody(0)
	r := e.deliver(t, "stripe", retry, stripeHeader(stripeSecret, retry, e.clock()))
	if d := accepted(t, r, http.StatusOK); d.Decision != dedup.Duplicate {
		t.Fatalf("resend: %+v, want a duplicate", d)
	}

	for name, h := range map[string]map[string]string{
		"forged":         stripeHeader("whsec_not_the_secret", body, e.clock()),
		"stale":          stripeHeader(stripeSecret, body, e.clock().Add(-6*time.Minute)),
		"future":         stripeHeader(stripeSecret, body, e.clock().Add(6*time.Minute)),
		"other body":     stripeHeader(stripeSecret, stripeBody(9), e.clock()),
		"missing":        {"Content-Type": "application/json"},
		"onceq's header": {api.SignatureHeader: testenv.Sign(stripeSecret, e.clock(), []byte(body))},
	} {
		t.Run(name, func(t *testing.T) {
			r := e.deliver(t, "stripe", body, h)
			problem(t, r, http.StatusUnauthorized)
			if r.Header.Get("WWW-Authenticate") == "" {
				t.Fatal("401 without WWW-Authenticate")
			}
		})
	}
	if n := e.tasks(); n != 1 {
		t.Fatalf("%d tasks, want 1", n)
	}
}

// The Standard Webhooks spec's test vector.
const (
	stdSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	stdID     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	stdTime   = 1614265330
	stdBody   = `{"test": 2432232314}`
	stdSig    = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func stdHeader(id, ts, sig string) map[string]string {
	return map[string]string{"webhook-id": id, "webhook-timestamp": ts, "webhook-signature": sig}
}

func TestStandardWebhook(t *testing.T) {
	t.Parallel()
	e := schemeEnv(t, "svix", api.SchemeStandard, stdSecret)
	e.mu.Lock()
	e.now = time.Unix(stdTime+30, 0)
	e.mu.Unlock()
	ts := strconv.Itoa(stdTime)
	a := accepted(t, e.deliver(t, "svix", stdBody, stdHeader(stdID, ts, stdSig)), http.StatusAccepted)
	if a.Key != "webhook:process/svix:"+stdID {
		t.Fatalf("accepted %+v, want the key from the signed webhook-id", a)
	}
	if wh := e.payloadOf(t); wh.Type != "" || string(wh.Body) != compact(t, stdBody) {
		t.Fatalf("payload %+v, want no type (ignored by the worker) and the body as sent", wh)
	}
	// The sender's retry carries the same id, timestamp and signature.
	if d := accepted(t, e.deliver(t, "svix", stdBody, stdHeader(stdID, ts, stdSig)), http.StatusOK); d.Decision != dedup.Duplicate {
		t.Fatalf("resend: %+v, want a duplicate", d)
	}
	for name, h := range map[string]map[string]string{
		"forged":            stdHeader(stdID, ts, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OF="),
		"another id":        stdHeader("msg_other", ts, stdSig),
		"another time":      stdHeader(stdID, strconv.Itoa(stdTime+1), stdSig),
		"v2 only":           stdHeader(stdID, ts, "v2,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="),
		"no id":             stdHeader("", ts, stdSig),
		"onceq's header":    {api.SignatureHeader: testenv.Sign(stdSecret, e.clock(), []byte(stdBody))},
		"no headers at all": {},
	} {
		t.Run(name, func(t *testing.T) { problem(t, e.deliver(t, "svix", stdBody, h), http.StatusUnauthorized) })
	}
	// The vector itself, six minutes on, is stale.
	e.advance(6 * time.Minute)
	problem(t, e.deliver(t, "svix", stdBody, stdHeader(stdID, ts, stdSig)), http.StatusUnauthorized)
	if n := e.tasks(); n != 1 {
		t.Fatalf("%d tasks, want 1", n)
	}
}

// A webhook-id is whatever the sender chose: one a key cannot hold as given
// (a space, a brace, a slash, non-ASCII) is accepted under a key derived
// from it, the same on every resend.
func TestStandardWebhookAnyID(t *testing.T) {
	t.Parallel()
	e := schemeEnv(t, "svix", api.SchemeStandard, stdSecret)
	signer, err := standardwebhooks.NewWebhook(stdSecret)
	if err != nil {
		t.Fatal(err)
	}
	const id = "msg 1/ä{x}"
	sig, err := signer.Sign(id, e.clock(), []byte(stdBody))
	if err != nil {
		t.Fatal(err)
	}
	h := stdHeader(id, strconv.FormatInt(e.clock().Unix(), 10), sig)
	a := accepted(t, e.deliver(t, "svix", stdBody, h), http.StatusAccepted)
	sum := sha256.Sum256([]byte("svix:" + id))
	if want := "webhook:process/~k" + hex.EncodeToString(sum[:]); a.Key != want {
		t.Fatalf("accepted %+v, want key %s", a, want)
	}
	if wh := e.payloadOf(t); wh.EventID != id {
		t.Fatalf("payload event id %q, want %q", wh.EventID, id)
	}
	if d := accepted(t, e.deliver(t, "svix", stdBody, h), http.StatusOK); d.Decision != dedup.Duplicate || d.Key != a.Key {
		t.Fatalf("resend: %+v, want a duplicate of %s", d, a.Key)
	}
}

// GitHub's documented example of X-Hub-Signature-256.
const (
	ghSecret = "It's a Secret to Everybody"
	ghSig    = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
)

func ghSign(body string) string {
	m := hmac.New(sha256.New, []byte(ghSecret))
	m.Write([]byte(body))
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// ghHeader is what GitHub sends with a delivery.
func ghHeader(event, delivery, sig string) map[string]string {
	return map[string]string{
		"X-GitHub-Event": event, "X-GitHub-Delivery": delivery, "X-GitHub-Hook-ID": "292430182",
		"X-GitHub-Hook-Installation-Target-ID": "79929171", "X-GitHub-Hook-Installation-Target-Type": "repository",
		"User-Agent": "GitHub-Hookshot/044aadd", "X-Hub-Signature-256": sig,
	}
}

const ghIssues = `{"action":"opened","issue":{"url":"https://api.github.com/repos/octocat/Hello-World/issues/1347",` +
	`"id":1,"number":1347,"title":"Found a bug","state":"open","user":{"login":"octocat","id":1}},` +
	`"repository":{"id":1296269,"full_name":"octocat/Hello-World","private":false},` +
	`"sender":{"login":"octocat","id":1,"type":"User"}}`

// ghKey is the job key of a GitHub delivery: the source, and the SHA-256
// of the event type, a newline and the body.
func ghKey(src, event, body string) string {
	sum := sha256.Sum256([]byte(event + "\n" + body))
	return "webhook:process/" + src + ":" + hex.EncodeToString(sum[:])
}

func TestGitHubWebhook(t *testing.T) {
	t.Parallel()
	e := schemeEnv(t, "github", api.SchemeGitHub, ghSecret)
	if got := ghSign("Hello, World!"); got != ghSig {
		t.Fatalf("the test's signer gives %s for GitHub's example, want %s", got, ghSig)
	}
	// GitHub's example verifies; its body is not JSON, so it is refused as
	// such, not as a bad signature.
	r := e.deliver(t, "github", "Hello, World!", ghHeader("push", "d-0", ghSig))
	if p := problem(t, r, http.StatusBadRequest); p.Type != api.ProblemType+"bad-request" {
		t.Fatalf("GitHub's example: %+v, want the body refused as JSON", p)
	}

	a := accepted(t, e.deliver(t, "github", ghIssues, ghHeader("issues", "72d3162e-cc78-11e3-81ab-4c9367dc0958", ghSign(ghIssues))), http.StatusAccepted)
	if want := ghKey("github", "issues", ghIssues); a.Key != want {
		t.Fatalf("accepted %+v, want %s: the SHA-256 of the event type and the signed body", a, want)
	}
	if wh := e.payloadOf(t); wh.Type != "issues" || string(wh.Body) != ghIssues {
		t.Fatalf("payload %+v, want the X-GitHub-Event type and the body as sent", wh)
	}
	// The delivery id is not signed: a captured body re-sent under a new one
	// is a duplicate, as is GitHub's own redelivery.
	for _, delivery := range []string{"attacker-chosen-delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958"} {
		r := e.deliver(t, "github", ghIssues, ghHeader("issues", delivery, ghSign(ghIssues)))
		if d := accepted(t, r, http.StatusOK); d.Decision != dedup.Duplicate {
			t.Fatalf("resend under %s: %+v, want a duplicate", delivery, d)
		}
	}
	// Under another event type the body is refused: the source's replay
	// window (by default a week) holds it.
	problem(t, e.deliver(t, "github", ghIssues, ghHeader("push", "d-9", ghSign(ghIssues))), http.StatusTooManyRequests)
	for name, h := range map[string]map[string]string{
		"forged":         ghHeader("issues", "d-1", ghSig),
		"sha1 only":      {"X-GitHub-Event": "issues", "X-Hub-Signature": "sha1=" + ghSign(ghIssues)[7:47]},
		"bare hex":       ghHeader("issues", "d-2", ghSign(ghIssues)[7:]),
		"onceq's header": {api.SignatureHeader: testenv.Sign(ghSecret, e.clock(), []byte(ghIssues))},
	} {
		t.Run(name, func(t *testing.T) { problem(t, e.deliver(t, "github", ghIssues, h), http.StatusUnauthorized) })
	}
	// GitHub's ping on hook creation: no route takes it, it is acknowledged.
	ping := `{"zen":"Keep it logically awesome.","hook_id":292430182,"hook":{"type":"Repository","id":292430182,"active":true,"events":["issues"]}}`
	accepted(t, e.deliver(t, "github", ping, ghHeader("ping", "d-3", ghSign(ping))), http.StatusAccepted)
	if n := e.tasks(); n != 2 {
		t.Fatalf("%d tasks, want 2", n)
	}
}

// GitHub signs neither X-GitHub-Event nor a time: a body accepted once is
// refused, 429, under another event type, and under its own once its job
// is forgotten (done record and task gone), until the replay window ends;
// a redelivery its job still answers is a duplicate.
func TestGitHubReplayWindow(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *api.Options) {
		o.WebhookSecrets = map[string][]string{"github": {ghSecret}, "other": {ghSecret}}
		o.WebhookSchemes = map[string]api.Scheme{"github": api.SchemeGitHub, "other": api.SchemeGitHub}
		c, err := tasks.NewCatalog(tasks.Windows{WebhookReplay: map[string]time.Duration{"github": time.Hour}})
		if err != nil {
			t.Fatal(err)
		}
		o.Catalog = c
	})
	send := func(src, event string) reply {
		t.Helper()
		return e.deliver(t, src, ghIssues, ghHeader(event, "d-1", ghSign(ghIssues)))
	}
	refused := func(r reply) {
		t.Helper()
		problem(t, r, http.StatusTooManyRequests)
		if s, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || s < 1 || s > 3600 {
			t.Fatalf("Retry-After %q, want the window's seconds left", r.Header.Get("Retry-After"))
		}
	}
	a := accepted(t, send("github", "issues"), http.StatusAccepted)
	if d := accepted(t, send("github", "issues"), http.StatusOK); d.Decision != dedup.Duplicate {
		t.Fatalf("redelivery: %+v, want a duplicate", d)
	}
	refused(send("github", "push"))
	if n := e.tasks(); n != 1 {
		t.Fatalf("%d tasks, want 1", n)
	}
	// The key forgets the job (done record expired, task gone): the window
	// still holds the body.
	k, err := dedup.ParseKey(a.Key)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.insp.DeleteTask("default", k.TaskID()); err != nil {
		t.Fatal(err)
	}
	refused(send("github", "issues"))
	if n := e.tasks(); n != 0 {
		t.Fatalf("%d tasks after the refusals, want 0", n)
	}
	// The window is the source's: another source's copy is its own event.
	accepted(t, send("other", "issues"), http.StatusAccepted)
}

// An unknown source and a known one whose request is not signed by its
// secret (no signature, a forged one, another scheme's) get the same
// bytes: an outsider cannot list the sources or learn how each signs.
func TestUnsignedAnswersAlike(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *api.Options) {
		o.WebhookSecrets = map[string][]string{source: {secret}, "stripe": {"whsec_test_stripe_0123456789"},
			"github": {ghSecret}, "svix": {stdSecret}}
		o.WebhookSchemes = map[string]api.Scheme{"stripe": api.SchemeStripe, "github": api.SchemeGitHub, "svix": api.SchemeStandard}
	})
	const body = `{"id":"evt_1","type":"user.created"}`
	ts := strconv.FormatInt(e.clock().Unix(), 10)
	forged := map[string]map[string]string{
		source:   {api.SignatureHeader: testenv.Sign("not-the-secret", e.clock(), []byte(body))},
		"stripe": stripeHeader("whsec_not_the_secret", body, e.clock()),
		"github": ghHeader("issues", "d-1", "sha256="+strings.Repeat("0", 64)),
		"svix":   stdHeader("msg_1", ts, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="),
	}
	malformed := map[string]map[string]string{
		source:   {api.SignatureHeader: "v1=zz"},
		"stripe": {"Stripe-Signature": "garbage"},
		"github": {"X-Hub-Signature-256": "sha1=abc"},
		"svix":   stdHeader("msg_1", "yesterday", "v1,!"),
	}
	type answer struct {
		status                 int
		contentType, challenge string
		contentLength, body    string
	}
	of := func(r reply) answer {
		return answer{r.Status, r.Header.Get("Content-Type"), r.Header.Get("WWW-Authenticate"), r.Header.Get("Content-Length"), string(r.Body)}
	}
	want := of(e.deliver(t, "nosuch", body, nil))
	if p := problem(t, e.deliver(t, "nosuch", body, nil), http.StatusUnauthorized); p.Type != api.ProblemType+"bad-signature" {
		t.Fatalf("unknown source: %+v, want bad-signature", p)
	}
	for _, src := range []string{source, "stripe", "github", "svix"} {
		other := "stripe"
		if src == other {
			other = source
		}
		for name, h := range map[string]map[string]string{"unsigned": nil, "forged": forged[src], "malformed": malformed[src],
			"unknown source, signed as " + src: forged[src], "another scheme's header": forged[other]} {
			path := src
			if strings.HasPrefix(name, "unknown") {
				path = "nosuch-" + src
			}
			if got := of(e.deliver(t, path, body, h)); got != want {
				t.Errorf("%s %s: %+v\nwant %+v", src, name, got, want)
			}
		}
	}
	// A signature by the secret, but stale: only a holder of the secret
	// is told why.
	stale := map[string]string{api.SignatureHeader: testenv.Sign(secret, e.clock().Add(-time.Hour), []byte(body))}
	if p := problem(t, e.deliver(t, source, body, stale), http.StatusUnauthorized); !strings.Contains(p.Detail, "tolerance") {
		t.Errorf("stale: %+v, want the tolerance named", p)
	}
	if n := e.tasks(); n != 0 {
		t.Fatalf("%d tasks, want none", n)
	}
}
