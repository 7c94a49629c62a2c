package api_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq/internal/api"
	"github.com/onceq/onceq/internal/testenv"
)

// held starts a webhook of size bytes on a raw connection and sends its
// headers and the first part of its body, then holds: the server has
// reserved its budget once it reads. finish sends the rest and returns the
// answer.
func held(t *testing.T, e *env, size int) (finish func() reply) {
	t.Helper()
	c, err := net.Dial("tcp", e.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(30 * time.Second))
	body := strings.Repeat(" ", size)
	fmt.Fprintf(c, "POST /v1/webhooks/%s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		source, size, body[:size/2])
	return func() reply {
		t.Helper()
		if _, err := io.WriteString(c, body[size/2:]); err != nil {
			t.Fatal(err)
		}
		return readReply(t, c)
	}
}

func readReply(t *testing.T, c net.Conn) reply {
	t.Helper()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// holding waits until the webhook body budget holds n bytes: a body sent
// in part has taken its room. (Probing with bodies instead would race the
// held body for that room.)
func holding(t *testing.T, e *env, n int64) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); e.h.BudgetHeld() != n; {
		if time.Now().After(deadline) {
			t.Fatalf("the budget holds %d bytes, want %d", e.h.BudgetHeld(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// unsigned posts body to the webhook route without a signature.
func (e *env) unsigned(t *testing.T, body string) reply {
	t.Helper()
	return e.doT(t, req{path: "/v1/webhooks/" + source, body: body, header: map[string]string{"Authorization": ""}})
}

// A body the budget has no room for is a 503 with Retry-After, its body
// unread; the room comes back once the holder's signature is checked.
func TestWebhookBudgetRefusesWhenSpentAndFreesOnRelease(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *api.Options) {
		o.MaxBodyBytes, o.WebhookBodyBudget, o.WebhookBudgetWait = 4<<10, 4<<10, 20*time.Millisecond
	})
	finish := held(t, e, 4<<10)
	holding(t, e, 4<<10)
	r := e.unsigned(t, "{}")
	p := problem(t, r, http.StatusServiceUnavailable)
	if p.Type != api.ProblemType+"body-budget-exhausted" || p.RetryAfter != 1 || r.Header.Get("Retry-After") != "1" {
		t.Fatalf("refusal %+v, Retry-After %q: want body-budget-exhausted, retry after 1s", p, r.Header.Get("Retry-After"))
	}
	// A signed body is refused alike: nothing is known of it before it is read.
	if r := e.webhook(eventBody("evt_budget", 1), "k-budget"); r.Status != http.StatusServiceUnavailable {
		t.Fatalf("signed webhook while the budget is spent: %d %s", r.Status, r.Body)
	}

	problem(t, finish(), http.StatusUnauthorized)
	if r := e.unsigned(t, "{}"); r.Status != http.StatusUnauthorized {
		t.Fatalf("after the held body was refused: %d %s, want 401: its reservation is back", r.Status, r.Body)
	}
	accepted(t, e.webhook(eventBody("evt_budget", 1), "k-budget"), http.StatusAccepted)
	if r := e.unsigned(t, "{}"); r.Status != http.StatusUnauthorized {
		t.Fatalf("after a body was accepted: %d %s, want 401: its reservation is back", r.Status, r.Body)
	}
}

// A body without Content-Length is read in steps against the same limit.
func TestWebhookBodyWithoutLength(t *testing.T) {
	t.Parallel()
	const limit = 200 << 10 // several doublings from the first step
	e := newEnv(t, func(o *api.Options) { o.MaxBodyBytes, o.WebhookBodyBudget = limit, limit })
	send := func(body, sig string) reply {
		t.Helper()
		// A reader of unknown length: net/http sends it chunked.
		hr, err := http.NewRequest(http.MethodPost, e.srv.URL+"/v1/webhooks/"+source, io.MultiReader(strings.NewReader(body)))
		if err != nil {
			t.Fatal(err)
		}
		hr.Header.Set("Content-Type", "application/json")
		hr.Header.Set(api.SignatureHeader, sig)
		resp, err := e.srv.Client().Do(hr)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return reply{Status: resp.StatusCode, Header: resp.Header, Body: b}
	}
	event := func(id string, pad int) string {
		return `{"id":"` + id + `","type":"thing.happened","data":{"pad":"` + strings.Repeat("a", pad) + `"}}`
	}
	for _, n := range []int{10, 64 << 10, 150 << 10, limit - 100} {
		body := event(fmt.Sprintf("evt_chunked_%d", n), n)
		if len(body) > limit {
			t.Fatalf("test body of %d bytes is over the limit", len(body))
		}
		accepted(t, send(body, testenv.Sign(secret, e.clock(), []byte(body))), http.StatusAccepted)
	}
	body := event("evt_chunked_big", limit)
	problem(t, send(body, testenv.Sign(secret, e.clock(), []byte(body))), http.StatusRequestEntityTooLarge)
	// Every step's reservation came back: the whole budget is free.
	body = event("evt_chunked_last", limit-100)
	accepted(t, send(body, testenv.Sign(secret, e.clock(), []byte(body))), http.StatusAccepted)
}

// A body that holds budget must arrive within WebhookBodyTimeout.
func TestWebhookSlowBodyTimesOut(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *api.Options) {
		o.MaxBodyBytes, o.WebhookBodyBudget, o.WebhookBodyTimeout = 4<<10, 4<<10, 50*time.Millisecond
	})
	c, err := net.Dial("tcp", e.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(c, "POST /v1/webhooks/%s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{", source)
	p := problem(t, readReply(t, c), http.StatusRequestTimeout)
	if p.Type != api.ProblemType+"body-timeout" {
		t.Fatalf("slow body: %+v", p)
	}
	if r := e.unsigned(t, "{}"); r.Status != http.StatusUnauthorized {
		t.Fatalf("after the slow body timed out: %d %s, want 401: its reservation is back", r.Status, r.Body)
	}
}

// headOnly opens a connection from local address from ("" for any) and
// sends a webhook's request head declaring size bytes, and then nothing.
func headOnly(t *testing.T, e *env, from string, size int) net.Conn {
	t.Helper()
	var d net.Dialer
	if from != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	c, err := d.Dial("tcp", e.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(c, "POST /v1/webhooks/%s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", source, size)
	return c
}

// A declared length takes no room: heads that declare the largest body and
// send none leave the whole budget to senders whose bytes arrive.
func TestWebhookHeadsHoldNoBudget(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *api.Options) {
		o.MaxBodyBytes, o.WebhookBodyBudget, o.WebhookBudgetWait = 4<<10, 4<<10, 20*time.Millisecond
		o.WebhookFirstByteTimeout = time.Minute // they hold nothing while they wait
	})
	for range 3 {
		headOnly(t, e, "", 4<<10)
	}
	// Their handlers are waiting for a first byte by the time the signed
	// ones arrive, or will find no room taken when they get there.
	for i := range 5 {
		accepted(t, e.webhook(eventBody(fmt.Sprintf("evt_heads_%d", i), 1), ""), http.StatusAccepted)
	}
}

// A body that has not started within WebhookFirstByteTimeout is a 408.
func TestWebhookFirstByteTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *api.Options) { o.WebhookFirstByteTimeout = 50 * time.Millisecond })
	p := problem(t, readReply(t, headOnly(t, e, "", 100)), http.StatusRequestTimeout)
	if p.Type != api.ProblemType+"body-timeout" || !strings.Contains(p.Detail, "did not start within 50ms") {
		t.Fatalf("a body that never started: %+v", p)
	}
}

// One peer address holds at most WebhookPeerBudget: beyond it its next
// body is refused at once, while another address still gets room.
func TestWebhookPeerBudget(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *api.Options) {
		o.MaxBodyBytes, o.WebhookBodyBudget, o.WebhookPeerBudget, o.WebhookBudgetWait = 4<<10, 16<<10, 4<<10, time.Minute
	})
	finish := held(t, e, 4<<10) // from 127.0.0.1, holding its 4 KiB once half is read
	holding(t, e, 4<<10)
	r := e.unsigned(t, "{}") // refused at once, not after the minute's wait for room
	if p := problem(t, r, http.StatusServiceUnavailable); !strings.Contains(p.Detail, "from this address") {
		t.Fatalf("refusal %+v: want the peer's share named", p)
	}
	// Another address has the rest of the budget.
	body := eventBody("evt_peer", 1)
	c, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}).Dial("tcp", e.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(c, "POST /v1/webhooks/%s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%s: %s\r\nContent-Length: %d\r\n\r\n%s",
		source, api.SignatureHeader, testenv.Sign(secret, e.clock(), []byte(body)), len(body), body)
	accepted(t, readReply(t, c), http.StatusAccepted)
	problem(t, finish(), http.StatusUnauthorized)
}

// A body refused for want of room is answered, and its sender reads the
// 503: the rest of the body is read and dropped, not left to make the
// connection close with a reset that overtakes the answer.
func TestWebhookRefusalIsReadNotReset(t *testing.T) {
	t.Parallel()
	const size = 1 << 20 // far beyond what net/http drains by itself
	e := newEnv(t, func(o *api.Options) {
		o.MaxBodyBytes, o.WebhookBodyBudget, o.WebhookPeerBudget, o.WebhookBudgetWait = size, size, size, 20*time.Millisecond
	})
	finish := held(t, e, size)
	holding(t, e, size)
	c, err := net.Dial("tcp", e.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	// As a sender that writes its whole request before it reads, and
	// slowly: longer than net/http waits before it closes a connection it
	// has stopped reading.
	fmt.Fprintf(c, "POST /v1/webhooks/%s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", source, size)
	piece := strings.Repeat(" ", size/16)
	for i := range 16 {
		if _, err := io.WriteString(c, piece); err != nil {
			t.Fatalf("sending piece %d of the refused body: %v, want it read to its end", i, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	r := readReply(t, c)
	if p := problem(t, r, http.StatusServiceUnavailable); r.Header.Get("Retry-After") == "" {
		t.Fatalf("refusal %+v without Retry-After", p)
	}
	problem(t, finish(), http.StatusUnauthorized)
}
