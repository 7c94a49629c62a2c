package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/dedup/storage"
	"github.com/onceq/onceq/internal/api"
	"github.com/onceq/onceq/tasks"
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
	// answered 409 so that a client reading only the status knows nothing
	// was charged, with nothing of Alice's job shown, and no replay.
	r := e.do(req{path: paymentPath, body: alice, header: as(bobToken, map[string]string{"Idempotency-Key": "order-2"})})
	held := problem(t, r, http.StatusConflict)
	if held.Type != api.ProblemType+"payment-id-held" || held.Key != a.Key ||
		r.Header.Get("Location") != "" || r.Header.Get(api.ReplayedHeader) != "" || strings.Contains(string(r.Body), a.TaskID) {
		t.Fatalf("bob sees alice's job: %+v %v", held, r.Header)
	}
	// A wrong guess at the content of Alice's payment gets the very same
	// answer as the right one: no oracle on her amount.
	wrong := e.do(req{path: paymentPath, body: paymentBody("pmt-alice", "acct-alice", 999), header: as(bobToken, map[string]string{"Idempotency-Key": "order-3"})})
	if wrong.Status != r.Status || string(wrong.Body) != string(r.Body) || wrong.Header.Get("Content-Type") != r.Header.Get("Content-Type") {
		t.Fatalf("right guess %d %s, wrong guess %d %s: want the same answer", r.Status, r.Body, wrong.Status, wrong.Body)
	}
	// Not stored for replay: had it been Alice's own request racing her
	// job's owner record, her retry must be answered afresh.
	if rec, err := e.replays.Status(t.Context(), api.ReplayKey("bob", "payments", "order-2")); err != nil || rec.State != dedup.StatusUnknown {
		t.Fatalf("the foreign answer's replay record %+v %v, want none", rec, err)
	}
	// Alice's own wrong content is her mistake to hear about.
	problem(t, e.do(req{path: paymentPath, body: paymentBody("pmt-alice", "acct-alice", 999), header: as(aliceToken, nil)}), http.StatusUnprocessableEntity)
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

// With payment ids per client (ONCEQ_PAYMENT_ID_SCOPE=client), tenants
// never meet: Bob's payment under Alice's id is his own charge.
func TestPaymentIDsPerClient(t *testing.T) {
	t.Parallel()
	cat, err := tasks.NewCatalog(tasks.Windows{PaymentIDsPerClient: true})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, twoClients, func(o *api.Options) { o.Catalog = cat })
	a := accepted(t, e.do(req{path: paymentPath, body: paymentBody("pmt-1", "acct-a", 100), header: as(aliceToken, nil)}), http.StatusAccepted)
	b := accepted(t, e.do(req{path: paymentPath, body: paymentBody("pmt-1", "acct-b", 100), header: as(bobToken, nil)}), http.StatusAccepted)
	if a.Key == b.Key || a.TaskID == b.TaskID {
		t.Fatalf("alice's %+v and bob's %+v are one job", a, b)
	}
	// Each client's repeat is still a duplicate of its own payment.
	if d := accepted(t, e.do(req{path: paymentPath, body: paymentBody("pmt-1", "acct-b", 100), header: as(bobToken, nil)}), http.StatusOK); d.TaskID != b.TaskID {
		t.Fatalf("bob's repeat %+v, want his job %s", d, b.TaskID)
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

// No id a client can type reaches another's scope: Bob's explicit
// "alice:pw-reset-9001" is his own job, so Alice's email under her key
// pw-reset-9001 is sent; and the same content from Bob is Bob's job, so he
// cannot confirm what Alice sent to whom.
func TestNoSquattingAcrossScopes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, twoClients)
	email := `{"to":"alice@example.com","subject":"Reset","body":"code 1234"}`
	squat := accepted(t, e.do(req{path: emailPath, body: `{"id":"alice:pw-reset-9001","to":"bob@example.com","subject":"x","body":"y"}`,
		header: as(bobToken, nil)}), http.StatusAccepted)
	mine := accepted(t, e.do(req{path: emailPath, body: email, header: as(aliceToken, map[string]string{"Idempotency-Key": "pw-reset-9001"})}), http.StatusAccepted)
	if mine.Key == squat.Key || mine.Decision != dedup.Enqueued {
		t.Fatalf("alice's email %+v met bob's squat %+v", mine, squat)
	}
	probe := accepted(t, e.do(req{path: emailPath, body: email, header: as(bobToken, nil)}), http.StatusAccepted)
	own := accepted(t, e.do(req{path: emailPath, body: email, header: as(aliceToken, nil)}), http.StatusAccepted)
	if probe.Decision != dedup.Enqueued || own.Decision != dedup.Enqueued || probe.Key == own.Key {
		t.Fatalf("the same content from bob %+v and alice %+v: want two jobs, one per client", probe, own)
	}
	// Alice's own repeat of that content is her duplicate.
	if again := accepted(t, e.do(req{path: emailPath, body: email, header: as(aliceToken, nil)}), http.StatusOK); again.Decision != dedup.Duplicate {
		t.Fatalf("alice's repeat %+v, want duplicate", again)
	}
}

// The payment rate rule is per client: Bob's charge of the same amount to
// the same account neither waits for nor reveals Alice's (a 429 would tell
// him when she charged it), while Alice's own repeat is throttled.
func TestRateRulePerClient(t *testing.T) {
	t.Parallel()
	e := newEnv(t, twoClients)
	accepted(t, e.do(req{path: paymentPath, body: paymentBody("pmt-a1", "acct-shared", 700), header: as(aliceToken, nil)}), http.StatusAccepted)
	accepted(t, e.do(req{path: paymentPath, body: paymentBody("pmt-b1", "acct-shared", 700), header: as(bobToken, nil)}), http.StatusAccepted)
	problem(t, e.do(req{path: paymentPath, body: paymentBody("pmt-a2", "acct-shared", 700), header: as(aliceToken, nil)}), http.StatusTooManyRequests)
}

// The API's own principals cannot be configured as client names.
func TestReservedClientNames(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	store, _ := dedup.NewRedisStore(rdb, storage.Options{})
	for _, name := range []string{"anonymous", "webhook-acme", "token-0123abcd"} {
		_, err := api.New(api.Options{Producer: oncetest.NewProducer(t, rdb, store, dedup.ProducerOptions{}), Store: store, Redis: rdb,
			Clients: []api.Client{{Name: name, Token: "tok-0123456789abcdef"}}})
		if err == nil || !strings.Contains(err.Error(), "reserved") {
			t.Errorf("client %q: %v, want refused as reserved", name, err)
		}
	}
}

// An operator's read-all token reads every job, a client's or one enqueued
// by library code, CLI or batch; other clients still read only their own.
func TestReadAllReadsEveryJob(t *testing.T) {
	t.Parallel()
	const opsToken = "ops-token-0123456789"
	e := newEnv(t, func(o *api.Options) {
		twoClients(o)
		o.Clients = append(o.Clients, api.Client{Name: "ops", Token: opsToken, ReadAll: true})
	})
	a := accepted(t, e.do(req{path: emailPath, body: `{"to":"a@example.com","subject":"s","body":"b"}`, header: as(aliceToken, nil)}), http.StatusAccepted)
	lib := tasks.Emails.Job(tasks.Email{ID: "from-code", To: "c@example.com", Subject: "s", Body: "b"})
	if _, err := oncetest.NewProducer(t, e.rdb, e.jobs, dedup.ProducerOptions{}).Enqueue(t.Context(), lib); err != nil {
		t.Fatal(err)
	}
	get := func(tok, key string) reply {
		return e.do(req{method: http.MethodGet, path: api.JobPath(key), header: as(tok, nil)})
	}
	for _, key := range []string{a.Key, lib.Key.String()} {
		if r := get(opsToken, key); r.Status != http.StatusOK {
			t.Errorf("ops reads %s: %d %s, want 200", key, r.Status, r.Body)
		}
		problem(t, get(bobToken, key), http.StatusNotFound)
	}
	problem(t, get(aliceToken, lib.Key.String()), http.StatusNotFound)
}

// With no tokens, or one client, the API shares the CLI's scope: the
// payment rule "same amount to the same account within 60 s" holds across
// a CLI charge and an HTTP one, and the caller reads the CLI's job. With
// several clients each has its own scope, and the CLI is none of them.
func TestOneScopeAcrossWaysIn(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		mod    func(*api.Options)
		auth   string
		shared bool
	}{
		{"no tokens", func(o *api.Options) { o.Tokens = nil }, "", true},
		{"one client", func(o *api.Options) { o.Tokens = nil; o.Clients = []api.Client{{Name: "shop", Token: aliceToken}} }, aliceToken, true},
		{"two clients", twoClients, aliceToken, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, tc.mod)
			// What `producer payment` does: the catalog's job, no scope.
			c, err := tasks.NewCatalog(tasks.Windows{})
			if err != nil {
				t.Fatal(err)
			}
			j, err := c.Build(tasks.TypePayment, []byte(paymentBody("pmt-cli", "acct-7", 4200)), "", "")
			if err != nil {
				t.Fatal(err)
			}
			cli := oncetest.NewProducer(t, e.rdb, e.jobs, dedup.ProducerOptions{Catalog: c.Catalog})
			if out, err := cli.Enqueue(t.Context(), j); err != nil || out.Decision != dedup.Enqueued {
				t.Fatalf("CLI charge: %+v, %v", out, err)
			}
			h := map[string]string{"Authorization": ""}
			if tc.auth != "" {
				h = as(tc.auth, nil)
			}
			r := e.do(req{path: paymentPath, body: paymentBody("pmt-http", "acct-7", 4200), header: h})
			read := e.do(req{method: http.MethodGet, path: "/v1/jobs/payment:charge/pmt-cli", header: h})
			if !tc.shared {
				accepted(t, r, http.StatusAccepted)
				problem(t, read, http.StatusNotFound)
				return
			}
			problem(t, r, http.StatusTooManyRequests)
			if read.Status != http.StatusOK {
				t.Fatalf("reading the CLI's job: %d %s", read.Status, read.Body)
			}
		})
	}
}
