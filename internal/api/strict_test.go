package api_test

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq/internal/api"
	"github.com/onceq/onceq/internal/testenv"
)

// A body whose meaning depends on which duplicate or case variant a parser
// keeps is refused before anything is enqueued.
func TestAmbiguousJSONIs400(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for name, body := range map[string]string{
		"duplicate":         `{"payment_id":"p1","account":"a1","amount":1,"amount":2,"currency":"EUR"}`,
		"case variant":      `{"payment_id":"p1","account":"a1","amount":100,"currency":"EUR","Amount":5}`,
		"case only":         `{"payment_id":"p1","account":"a1","Amount":100,"currency":"EUR"}`,
		"duplicate escaped": `{"payment_id":"p1","account":"a1","amount":1,"\u0061mount":2,"currency":"EUR"}`,
	} {
		t.Run(name, func(t *testing.T) {
			problem(t, e.doT(t, req{path: paymentPath, body: body}), http.StatusBadRequest)
		})
	}
	ev := `{"id":"evt_d","type":"user.created","data":{"email":"a@example.com","email":"b@example.com"}}`
	r := e.do(req{path: "/v1/webhooks/" + source, body: ev, header: map[string]string{"Authorization": "",
		"Idempotency-Key": "d-dup", api.SignatureHeader: testenv.Sign(secret, e.clock(), []byte(ev))}})
	problem(t, r, http.StatusBadRequest)
	if n := e.tasks(); n != 0 {
		t.Fatalf("%d tasks, want 0", n)
	}
}

// The replay check compares meanings, not bytes: the same request spelt
// another way is a replay, a request that means something else is not.
func TestFingerprintIsTheDecodedRequest(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	first := e.post(paymentPath, `{"payment_id":"pmt-f","account":"acct-f","amount":100,"currency":"EUR"}`, "fp-1")
	accepted(t, first, http.StatusAccepted)
	for _, same := range []string{
		`{"currency":"EUR","amount":100,"account":"acct-f","payment_id":"pmt-f"}`,
		"{ \"payment_id\" : \"pmt-f\",\n \"account\":\"acct-f\", \"amount\":1e2, \"currency\":\"EUR\", \"description\":\"\"}",
		`{"payment_id":"pmt-\u0066","account":"acct-f","amount":100,"currency":"EUR"}`,
	} {
		r := e.post(paymentPath, same, "fp-1")
		if strings.Contains(same, "1e2") {
			// 1e2 is not an integer literal: refused, not mistaken.
			problem(t, r, http.StatusBadRequest)
			continue
		}
		if r.Header.Get(api.ReplayedHeader) != "true" || !bytes.Equal(r.Body, first.Body) {
			t.Fatalf("%s: %d %s, want the replay", same, r.Status, r.Body)
		}
	}
	spaced := "{ \"payment_id\" : \"pmt-f\",\n \"account\":\"acct-f\", \"amount\":100, \"currency\":\"EUR\", \"description\":\"\"}"
	if r := e.post(paymentPath, spaced, "fp-1"); r.Header.Get(api.ReplayedHeader) != "true" {
		t.Fatalf("spacing and an empty optional field: %d %s, want the replay", r.Status, r.Body)
	}
	problem(t, e.post(paymentPath, `{"payment_id":"pmt-f","account":"acct-f","amount":101,"currency":"EUR"}`, "fp-1"),
		http.StatusUnprocessableEntity)

	// A webhook's delivery attempt is not part of its meaning.
	e.advance(time.Second)
	accepted(t, e.webhook(eventBody("evt_fp", 1), "d-fp"), http.StatusAccepted)
	if r := e.webhook(eventBody("evt_fp", 2), "d-fp"); r.Header.Get(api.ReplayedHeader) != "true" {
		t.Fatalf("redelivery: %d %s, want the replay", r.Status, r.Body)
	}
}
