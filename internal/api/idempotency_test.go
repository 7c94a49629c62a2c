package api_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/api"
)

func TestReplayIsByteIdentical(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	body := `{"to":"ada@example.com","subject":"Receipt","body":"<b>thanks</b> & bye"}`
	first := e.post(emailPath, body, "receipt-42")
	accepted(t, first, http.StatusAccepted)
	if first.Header.Get(api.ReplayedHeader) != "" {
		t.Fatalf("first response marked replayed")
	}
	// The same request re-serialised (key order, spacing) is the same request.
	again := `{ "body":"<b>thanks</b> & bye", "subject":"Receipt", "to":"ada@example.com" }`
	for _, b := range []string{body, again} {
		r := e.post(emailPath, b, "receipt-42")
		if r.Status != first.Status || !bytes.Equal(r.Body, first.Body) {
			t.Fatalf("replay %d %q, want %d %q", r.Status, r.Body, first.Status, first.Body)
		}
		if r.Header.Get(api.ReplayedHeader) != "true" {
			t.Fatalf("replay without %s: true", api.ReplayedHeader)
		}
		for _, h := range []string{"Content-Type", "Location", "Content-Length"} {
			if r.Header.Get(h) != first.Header.Get(h) {
				t.Errorf("replayed %s %q, first %q", h, r.Header.Get(h), first.Header.Get(h))
			}
		}
	}
	// X-Idempotency-Key is the same key.
	r := e.do(req{path: emailPath, body: body, header: map[string]string{"X-Idempotency-Key": "receipt-42"}})
	if r.Header.Get(api.ReplayedHeader) != "true" || !bytes.Equal(r.Body, first.Body) {
		t.Fatalf("X-Idempotency-Key not replayed: %d %s", r.Status, r.Body)
	}
	if n := e.tasks(); n != 1 {
		t.Fatalf("%d tasks, want 1", n)
	}
	if n := e.outcomes("duplicate"); n != 3 {
		t.Errorf("%d replay decisions observed, want 3", n)
	}
}

func TestKeyReusedWithAnotherBodyIs422(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	accepted(t, e.post(paymentPath, paymentBody("pmt-m", "acct-1", 100), "order-1"), http.StatusAccepted)
	p := problem(t, e.post(paymentPath, paymentBody("pmt-m", "acct-1", 999), "order-1"), http.StatusUnprocessableEntity)
	if p.Type != api.ProblemType+"idempotency-key-reused" || p.Key != "order-1" {
		t.Fatalf("problem %+v", p)
	}
	// Keys are scoped per route: the same key on another route is another request.
	accepted(t, e.post(emailPath, `{"to":"a@example.com","subject":"s","body":"b","id":"e-1"}`, "order-1"), http.StatusAccepted)
	if n := e.outcomes("conflict"); n != 1 {
		t.Errorf("%d mismatch decisions, want 1", n)
	}
	if n := e.tasks(); n != 2 {
		t.Fatalf("%d tasks, want 2", n)
	}
}

func TestInFlightIs409(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// Another API process holds the key: its request has not finished.
	c, err := e.replays.Claim(t.Context(), api.ReplayKey(api.DerivedPrincipal(token), "payments", "slow-1"), "", time.Minute, "")
	if err != nil || c.Outcome != dedup.Acquired {
		t.Fatalf("claim: %+v %v", c, err)
	}
	r := e.post(paymentPath, paymentBody("pmt-slow", "acct-1", 100), "slow-1")
	p := problem(t, r, http.StatusConflict)
	// The wait is what is left of the other request's minute-long claim.
	if ra, _ := strconv.Atoi(r.Header.Get("Retry-After")); p.Key != "slow-1" || ra < 50 || ra > 60 || p.RetryAfter != ra {
		t.Fatalf("409 %+v, Retry-After %q; want the claim's remaining 50..60 s", p, r.Header.Get("Retry-After"))
	}
	if n := e.tasks(); n != 0 {
		t.Fatalf("%d tasks, want 0", n)
	}
}

// Fifty clients race one key: one request runs, the others are replayed or
// told it is in flight, and exactly one task exists.
func TestConcurrentSameKeyEnqueuesOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	body := paymentBody("pmt-race", "acct-race", 4200)
	const n = 50
	replies := make([]reply, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			replies[i] = e.post(paymentPath, body, "race-key")
		})
	}
	close(start)
	wg.Wait()

	var fresh, replayed, conflict int
	var original []byte
	for _, r := range replies {
		switch {
		case r.Status == http.StatusAccepted && r.Header.Get(api.ReplayedHeader) == "":
			fresh++
			original = r.Body
		case r.Status == http.StatusAccepted:
			replayed++
		case r.Status == http.StatusConflict:
			problem(t, r, http.StatusConflict)
			conflict++
		default:
			t.Fatalf("unexpected reply %d %s", r.Status, r.Body)
		}
	}
	if fresh != 1 || replayed+conflict != n-1 {
		t.Fatalf("%d fresh, %d replayed, %d conflicts; want 1 fresh", fresh, replayed, conflict)
	}
	for _, r := range replies {
		if r.Status == http.StatusAccepted && !bytes.Equal(r.Body, original) {
			t.Fatalf("replay %q differs from %q", r.Body, original)
		}
	}
	if p := e.pending("critical"); len(p) != 1 || p[0].ID != "payment:charge=pmt~race" {
		t.Fatalf("pending tasks %v, want exactly payment:charge=pmt~race", p)
	}
	if n := e.tasks(); n != 1 {
		t.Fatalf("%d tasks, want 1", n)
	}
	t.Logf("%d replayed, %d in flight", replayed, conflict)
	// Once the winner is done, a latecomer is replayed.
	late := e.post(paymentPath, body, "race-key")
	if late.Header.Get(api.ReplayedHeader) != "true" || !bytes.Equal(late.Body, original) {
		t.Fatalf("late request %d %s, want the original replayed", late.Status, late.Body)
	}
}

// A 429 is not stored: a retry with the same key runs again.
func TestThrottledIsNotReplayed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	accepted(t, e.post(paymentPath, paymentBody("pmt-t1", "acct-t", 300), ""), http.StatusAccepted)
	for range 2 {
		r := e.post(paymentPath, paymentBody("pmt-t2", "acct-t", 300), "retry-me")
		problem(t, r, http.StatusTooManyRequests)
		if r.Header.Get(api.ReplayedHeader) != "" {
			t.Fatal("a 429 was replayed")
		}
	}
	rec, err := e.replays.Status(t.Context(), api.ReplayKey(api.DerivedPrincipal(token), "payments", "retry-me"))
	if err != nil || rec.State != dedup.StatusUnknown {
		t.Fatalf("replay record %+v %v, want none: a request that never ran leaves nothing", rec, err)
	}
	// Nothing behind it: the key takes a corrected body at once.
	accepted(t, e.post(paymentPath, paymentBody("pmt-t3", "acct-t3", 300), "retry-me"), http.StatusAccepted)
}

// Odd keys (spaces, braces, long, escaped) are usable: hashed, not refused.
// A key is the decoded sf-string: its escapes and parameters do not make
// another key.
func TestOddKeys(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for i, keys := range [][]string{
		{`"has space"`, `"has space";v=1`, ` "has space" `},
		{`"{brace}"`, `"{brace}";a;b="x;y"`},
		{`"` + strings.Repeat("x", 200) + `"`},
		{`"a\"b\\c"`, `"a\"b\\c";n=2`},
		{`8e03978e-40d5-43e8-bc93-6894a57f9324`, `"8e03978e-40d5-43e8-bc93-6894a57f9324"`}, // bare: the leniency
	} {
		body := fmt.Sprintf(`{"to":"a@example.com","subject":"s%d","body":"b"}`, i)
		first := accepted(t, e.post(emailPath, body, keys[0]), http.StatusAccepted)
		if strings.ContainsAny(first.Key, " {}") {
			t.Errorf("key %q leaked into job key %q", keys[0], first.Key)
		}
		for _, key := range keys {
			r := e.post(emailPath, body, key)
			if r.Header.Get(api.ReplayedHeader) != "true" {
				t.Errorf("key %q (as %q): retry not replayed: %d %s", keys[0], key, r.Status, r.Body)
			}
		}
	}
	if k := api.ReplayKey(api.DerivedPrincipal(token), "payments", "has space"); strings.Contains(k.ID, " ") {
		t.Errorf("replay key %v", k)
	}
	if _, err := dedup.ParseKey(api.ReplayKey("p", "webhooks/"+strings.Repeat("s", 300), "k").String()); err != nil {
		t.Errorf("replay key of a long route: %v", err)
	}
}

// A body without Content-Length still meets the limit while it is read.
func TestStreamedOversizedBodyIs413(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	big := `{"to":"a@example.com","subject":"s","body":"` + strings.Repeat("x", 8<<10) + `"}`
	hr, err := http.NewRequest(http.MethodPost, e.srv.URL+emailPath, io.MultiReader(strings.NewReader(big)))
	if err != nil {
		t.Fatal(err)
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Authorization", "Bearer "+token)
	resp, err := e.srv.Client().Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if hr.ContentLength != 0 {
		t.Fatalf("request had a Content-Length (%d); the test wants a streamed body", hr.ContentLength)
	}
	problem(t, reply{Status: resp.StatusCode, Header: resp.Header, Body: b}, http.StatusRequestEntityTooLarge)
	if n := e.tasks(); n != 0 {
		t.Fatalf("%d tasks, want 0", n)
	}
}

// What is not an sf-string (nor the bare leniency) is a 400 problem, and
// nothing is enqueued.
func TestBadKeySyntax(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, key := range []string{
		`has space`, strings.Repeat("é", 10), `"é"`, `"a", "b"`, `a, b`, `"unclosed`, `"bad\x"`,
		`"a"b`, `""`, `"a";`, `"a";B=1`, `"tab\there"`,
	} {
		r := e.post(emailPath, `{"to":"a@example.com","subject":"s","body":"b"}`, key)
		p := problem(t, r, http.StatusBadRequest)
		if !strings.HasSuffix(p.Type, "bad-idempotency-key") {
			t.Errorf("key %q: problem %s, want bad-idempotency-key", key, p.Type)
		}
	}
	if n := e.tasks(); n != 0 {
		t.Fatalf("%d tasks, want 0", n)
	}
}

// A Structured Field item of another type than String is no key, though
// the bare leniency would take its text: the detail names the type and
// how to send it quoted. An unquoted UUID is a key as it is.
func TestKeyOfAnotherTypeIs400(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for key, typ := range map[string]string{`42`: "Integer", `-1.5`: "Decimal", `?1`: "Boolean", `:Zm9v:`: "Byte Sequence"} {
		r := e.post(emailPath, `{"to":"a@example.com","subject":"s","body":"b"}`, key)
		p := problem(t, r, http.StatusBadRequest)
		if want := "is a Structured Field " + typ + ", not a String: send the key quoted, e.g. Idempotency-Key: \"" + key + `"`; !strings.HasSuffix(p.Type, "bad-idempotency-key") || !strings.Contains(p.Detail, want) {
			t.Errorf("key %q: problem %s %q, want bad-idempotency-key mentioning %q", key, p.Type, p.Detail, want)
		}
	}
	if n := e.tasks(); n != 0 {
		t.Fatalf("%d tasks, want 0", n)
	}
	const uuid = "550e8400-e29b-41d4-a716-446655440000"
	if r := e.post(emailPath, `{"to":"a@example.com","subject":"s","body":"b"}`, uuid); r.Status != http.StatusAccepted {
		t.Fatalf("unquoted UUID key: %d %s", r.Status, r.Body)
	}
}
