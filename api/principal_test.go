package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/api"
)

const (
	aliceToken = "alice-token-0123456789"
	bobToken   = "bob-token-0123456789"
)

func twoClients(o *api.Options) {
	o.Clients = []api.Client{{Name: "alice", Token: aliceToken}, {Name: "bob", Token: bobToken}}
}

func as(tok string, more map[string]string) map[string]string {
	h := map[string]string{"Authorization": "Bearer " + tok}
	for k, v := range more {
		h[k] = v
	}
	return h
}

// Keys belong to their client: Bob can neither replay, collide with nor
// read what Alice did under the same Idempotency-Key.
func TestKeysAreScopedToTheirClient(t *testing.T) {
	t.Parallel()
	e := newEnv(t, twoClients)
	alice := paymentBody("pmt-alice", "acct-alice", 100)
	first := e.do(req{path: paymentPath, body: alice, header: as(aliceToken, map[string]string{"Idempotency-Key": "order-1"})})
	a := accepted(t, first, http.StatusAccepted)

	// Bob's own payment under Alice's key is no mismatch: his key is his.
	bob := accepted(t, e.do(req{path: paymentPath, body: paymentBody("pmt-bob", "acct-bob", 100),
		header: as(bobToken, map[string]string{"Idempotency-Key": "order-1"})}), http.StatusAccepted)
	if bob.Key != "payment:charge/pmt-bob" {
		t.Fatalf("bob's payment %+v", bob)
	}
	// Alice's body under a key of Bob's: deduplicated by payment id (global),
	// but nothing of Alice's job is shown, and it is no replay.
	r := e.do(req{path: paymentPath, body: alice, header: as(bobToken, map[string]string{"Idempotency-Key": "order-2"})})
	dup := accepted(t, r, http.StatusOK)
	if dup.Decision != onceq.Duplicate || dup.TaskID != "" || dup.State != "" || dup.Reason != "" || dup.Result != nil ||
		r.Header.Get("Location") != "" || r.Header.Get(api.ReplayedHeader) != "" {
		t.Fatalf("bob sees alice's job: %+v %v", dup, r.Header)
	}
	// Alice's own retry without a key still sees her job.
	mine := accepted(t, e.do(req{path: paymentPath, body: alice, header: as(aliceToken, nil)}), http.StatusOK)
	if mine.TaskID != a.TaskID || mine.State == "" {
		t.Fatalf("alice's duplicate %+v", mine)
	}

	get := func(tok, key string) reply {
		return e.do(req{method: http.MethodGet, path: "/v1/jobs/" + key, header: as(tok, nil)})
	}
	if r := get(bobToken, a.Key); r.Status != http.StatusNotFound {
		t.Fatalf("bob reads alice's job: %d %s", r.Status, r.Body)
	}
	problem(t, get(bobToken, a.Key), http.StatusNotFound)
	if r := get(aliceToken, a.Key); r.Status != http.StatusOK {
		t.Fatalf("alice reads her job: %d %s", r.Status, r.Body)
	}
	if n := e.tasks(); n != 2 {
		t.Fatalf("%d tasks, want 2", n)
	}
}

// An email keyed by the header: Bob's same header is another email, not a
// duplicate that shows him Alice's recipient.
func TestEmailKeyIsTheClients(t *testing.T) {
	t.Parallel()
	e := newEnv(t, twoClients)
	h := func(tok string) map[string]string { return as(tok, map[string]string{"Idempotency-Key": "mail-1"}) }
	a := accepted(t, e.do(req{path: emailPath, body: `{"to":"alice@example.com","subject":"s","body":"b"}`, header: h(aliceToken)}), http.StatusAccepted)
	r := e.do(req{path: emailPath, body: `{"to":"bob@example.com","subject":"s","body":"b"}`, header: h(bobToken)})
	b := accepted(t, r, http.StatusAccepted)
	if a.Key == b.Key || strings.Contains(string(r.Body), "alice@") {
		t.Fatalf("bob's email %s collides with alice's %s: %s", b.Key, a.Key, r.Body)
	}
}

// A 429 names the caller's own job only, not the one that holds the window.
func TestThrottleDetailNamesNoOtherClient(t *testing.T) {
	t.Parallel()
	e := newEnv(t, twoClients)
	accepted(t, e.do(req{path: paymentPath, body: paymentBody("pmt-secret-a", "acct-9", 100), header: as(aliceToken, nil)}), http.StatusAccepted)
	r := e.do(req{path: paymentPath, body: paymentBody("pmt-b", "acct-9", 100), header: as(bobToken, nil)})
	problem(t, r, http.StatusTooManyRequests)
	if strings.Contains(string(r.Body), "pmt-secret-a") {
		t.Fatalf("429 names alice's payment: %s", r.Body)
	}
}

// The scheme is case-insensitive (RFC 9110 §11.1); every 401 has a challenge.
func TestBearerScheme(t *testing.T) {
	t.Parallel()
	e := newEnv(t, twoClients)
	for i, scheme := range []string{"bearer", "BEARER", "Bearer"} {
		r := e.do(req{path: paymentPath, body: paymentBody("pmt-s"+string(rune('a'+i)), "acct-s"+string(rune('a'+i)), 1),
			header: map[string]string{"Authorization": scheme + " " + aliceToken}})
		accepted(t, r, http.StatusAccepted)
	}
	for _, a := range []string{"", "Basic " + aliceToken, "Bearer", "Bearer nope-nope-nope-nope", "Bearer" + aliceToken} {
		r := e.do(req{path: paymentPath, body: paymentBody("pmt-x", "acct-x", 1), header: map[string]string{"Authorization": a}})
		problem(t, r, http.StatusUnauthorized)
		if !strings.HasPrefix(r.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("Authorization %q: 401 without a Bearer challenge", a)
		}
	}
}

func TestDerivedPrincipalIsStable(t *testing.T) {
	t.Parallel()
	p := api.DerivedPrincipal(token)
	if p != api.DerivedPrincipal(token) || p == api.DerivedPrincipal("old-token") || strings.Contains(p, token) {
		t.Fatalf("derived principal %q", p)
	}
}
