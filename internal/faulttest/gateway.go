package faulttest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/onceq/onceq/tasks/gateway"
)

// Gateway is the payment gateway of fault tests: the real gateway.Server
// behind a handler that counts every POST per Idempotency-Key before the
// server's own deduplication, counts the charges the server actually creates, and can
// stall the first POST of a key to hold a worker in the middle of its handler,
// and decline chosen payments for good.
type Gateway struct {
	URL string

	server gateway.Server
	srv    *httptest.Server
	quit   chan struct{}

	mu       sync.Mutex
	posts    map[string]int
	charges  map[string]int
	declines map[string]int
	decline  string // payment id prefix declined under a first incarnation's key
	stalls   map[string]*Stall
}

// Stall holds the first POST of one key.
type Stall struct {
	// AfterCharge lets the server charge first and holds only the response:
	// the worker then dies or is cut off between the effect and its record.
	AfterCharge bool
	// HonourCancel ends the hold when the client goes away; before the
	// charge, that means no charge. Without it the gateway carries on, as a
	// remote service does when its client hangs up.
	HonourCancel bool
	// For is how long to hold; 0 holds until Release.
	For time.Duration

	arrived  chan struct{}
	release  chan struct{}
	finished chan struct{}
	once     sync.Once
	outcome  string
}

// Arrived is closed when the stalled POST has arrived.
func (s *Stall) Arrived() <-chan struct{} { return s.arrived }

// Release ends the hold.
func (s *Stall) Release() { s.once.Do(func() { close(s.release) }) }

// Finished is closed when the stalled request is over; Outcome says how.
func (s *Stall) Finished() <-chan struct{} { return s.finished }

// Outcome is "aborted" (the client left before the charge), "charged" or
// "replayed", valid once Finished is closed.
func (s *Stall) Outcome() string { return s.outcome }

// NewGateway starts a gateway on a loopback port.
func NewGateway() *Gateway {
	g := &Gateway{quit: make(chan struct{}), posts: map[string]int{}, charges: map[string]int{},
		declines: map[string]int{}, stalls: map[string]*Stall{}}
	g.srv = httptest.NewServer(g)
	g.URL = g.srv.URL
	return g
}

// Stall holds the first POST of key as s says, and returns s.
func (g *Gateway) Stall(key string, s *Stall) *Stall {
	s.arrived, s.release, s.finished = make(chan struct{}), make(chan struct{}), make(chan struct{})
	g.mu.Lock()
	g.stalls[key] = s
	g.mu.Unlock()
	return s
}

// DeclineFirst declines for good (402, which no retry changes) every charge
// of a payment id starting with prefix under its first incarnation's
// Idempotency-Key, and accepts it under a later one ("...#2"): a card that
// was fixed before the payment was sent again.
func (g *Gateway) DeclineFirst(prefix string) {
	g.mu.Lock()
	g.decline = prefix
	g.mu.Unlock()
}

// declined says whether this POST is one DeclineFirst refuses.
func (g *Gateway) declined(key string, body []byte) bool {
	var p struct {
		PaymentID string `json:"payment_id"`
	}
	g.mu.Lock()
	prefix := g.decline
	g.mu.Unlock()
	return prefix != "" && !strings.Contains(key, "#") && json.Unmarshal(body, &p) == nil &&
		strings.HasPrefix(p.PaymentID, prefix)
}

// ServeHTTP counts the POST, applies a decline or a stall, and forwards to
// the built-in gateway.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	// Read the body now: a stalled request may outlive its client.
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))

	var st *Stall
	if r.Method == http.MethodPost {
		g.mu.Lock()
		g.posts[key]++
		if g.posts[key] == 1 {
			st = g.stalls[key]
		}
		g.mu.Unlock()
		if g.declined(key, body) {
			g.mu.Lock()
			g.declines[key]++
			g.mu.Unlock()
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusPaymentRequired)
			_, _ = io.WriteString(w, `{"title":"card declined","detail":"the card was declined"}`)
			return
		}
	}
	if st != nil {
		close(st.arrived)
		defer close(st.finished)
		if !st.AfterCharge && !g.hold(r.Context(), st) {
			st.outcome = "aborted"
			return
		}
	}
	// The server must charge even when the client has gone.
	rec := httptest.NewRecorder()
	g.server.ServeHTTP(rec, r.WithContext(context.WithoutCancel(r.Context())))
	replayed := rec.Header().Get("Idempotent-Replayed") == "true"
	if rec.Code == http.StatusCreated && !replayed {
		g.mu.Lock()
		g.charges[key]++
		g.mu.Unlock()
	}
	if st != nil {
		st.outcome = "charged"
		if replayed {
			st.outcome = "replayed"
		}
		if st.AfterCharge {
			g.hold(r.Context(), st)
		}
	}
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

// hold waits as st says; false when the client went away first.
func (g *Gateway) hold(ctx context.Context, st *Stall) bool {
	var timer <-chan time.Time
	if st.For > 0 {
		t := time.NewTimer(st.For)
		defer t.Stop()
		timer = t.C
	}
	var gone <-chan struct{}
	if st.HonourCancel {
		gone = ctx.Done()
	}
	select {
	case <-timer:
	case <-st.release:
	case <-g.quit:
	case <-gone:
		return false
	}
	return true
}

// Posts is how many POSTs carried key, including replays and aborted ones.
func (g *Gateway) Posts(key string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.posts[key]
}

// Charges is how many charges the server created for key: the effect count.
func (g *Gateway) Charges(key string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.charges[key]
}

// Declines is how many POSTs of key DeclineFirst refused.
func (g *Gateway) Declines(key string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.declines[key]
}

// Charged lists the keys with at least one charge, sorted.
func (g *Gateway) Charged() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	keys := make([]string, 0, len(g.charges))
	for k := range g.charges {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Total is how many charges the server made, by its own count.
func (g *Gateway) Total() int { return g.server.Total() }

// Close ends every hold and stops the server.
func (g *Gateway) Close() {
	close(g.quit)
	g.srv.Close()
}
