// Package httpidem gives net/http handlers the semantics of the IETF
// httpapi Idempotency-Key draft, on a onceq Store: the first request with
// a key runs and, when it succeeds (2xx), its response is stored; a retry
// with the same key and the same request gets it back byte for byte with
// "Idempotent-Replayed: true"; a retry while the first is in flight is a
// 409 whose Retry-After is what is left of its claim; the same key with
// another request is a 422. Other answers (429, 5xx) are not stored and
// leave nothing behind, so a retry runs at once.
//
// A fresh 2xx goes out while it is being stored (Guard.Send): the store's write
// overlaps the response, and the connection serves the client's next
// request meanwhile. Until the write lands, a retry reaching this process
// is replayed from memory and one reaching another replica waits up to
// Options.InFlightWait for it. Call Guard.Drain once the http.Server has
// shut down, before the process exits.
//
// The key (Key) is a Structured Field String, "order-2001"; a bare value
// such as an unquoted UUID is taken as it is, unless it is an item of
// another type (42, -1.5, ?1, :Zm9v:), which is a 400 naming the type.
//
// Middleware wraps a handler of one's own; `producer serve` calls
// Guard.Send for its routes, where "the same request" is the decoded job.
package httpidem

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/storage"
)

// Namespace is the key namespace of the replay records; their id is
// "<scope>:<Idempotency-Key>".
const Namespace = "http"

// ReplayedHeader marks a response replayed from an earlier request.
const ReplayedHeader = "Idempotent-Replayed"

// Problem kinds this package answers with.
const (
	kindInFlight    = "request-in-progress"
	kindMismatch    = "idempotency-key-reused"
	kindUnavailable = "unavailable"
	kindInternal    = "internal"
)

// Options configures New.
type Options struct {
	// Lease of a claim: how long a retry of a request whose process died
	// in flight (or that reaches another replica after a lost Redis reply)
	// is answered 409. It covers the request's own work. Default: 30s.
	Lease time.Duration
	// Timeout bounds storing a response after the handler returned, even
	// when the request's context has ended. Default: 5s.
	Timeout time.Duration
	// InFlightWait is how long a request that meets another in flight
	// under its key waits for that one's answer before it is told 409: the
	// first request's response goes out while its replay is being stored
	// (Send), and a retry reaching another replica in that moment gets the
	// replay a moment later instead of a 409. Negative: no wait. Default:
	// 100ms.
	InFlightWait time.Duration
	// ReplayCacheTTL is how long a process answers a replay from memory
	// once it has stored or replayed the response; keep it below the
	// store's DoneTTL. Negative disables the cache. Default: 30s.
	ReplayCacheTTL time.Duration
	// Observer sees each decision (claimed, duplicate, in_progress,
	// mismatch, error) as Op "claim". Default: none.
	Observer dedup.Observer
	// OnError hears of a failure the request survives (a claim release or
	// a stored response that did not reach the store). Default: none.
	OnError func(ctx context.Context, msg string, k dedup.Key, err error)
}

// Guard runs requests at most once per key while its store keeps the
// record. Its store's DoneTTL is how long a response is replayed: give it
// a store of its own, whose ResultTTL is at least its DoneTTL (a replay
// needs the stored response, which a compact mark does not keep).
type Guard struct {
	store   storage.Store
	opts    Options
	claims  *claims
	replays *replayCache
	tails   sync.WaitGroup // storing responses already sent (Send)
}

// New returns a Guard on store.
func New(store storage.Store, o Options) (*Guard, error) {
	if store == nil {
		return nil, errors.New("httpidem: a store is required")
	}
	if o.Lease == 0 {
		o.Lease = 30 * time.Second
	}
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Second
	}
	if o.ReplayCacheTTL == 0 {
		o.ReplayCacheTTL = 30 * time.Second
	}
	if o.InFlightWait == 0 {
		o.InFlightWait = 100 * time.Millisecond
	}
	if o.Lease < time.Millisecond || o.Timeout < 0 {
		return nil, errors.New("httpidem: Lease and Timeout must be positive")
	}
	if o.Observer == nil {
		o.Observer = func(context.Context, dedup.Event) {}
	}
	if o.OnError == nil {
		o.OnError = func(context.Context, string, dedup.Key, error) {}
	}
	return &Guard{store: store, opts: o, claims: newClaims(), replays: newReplayCache(o.ReplayCacheTTL)}, nil
}

// ReplayKey is the key under which the response to a request with
// Idempotency-Key key, in scope (a client and a route, say), is stored.
// Another scope's same key is another key.
func ReplayKey(scope, key string) dedup.Key {
	// scopedID always yields a valid id.
	return dedup.Key{Namespace: Namespace, ID: scopedID(scope, key)}
}

// scopedID is "scope:key" when that is a valid id, else the key is
// replaced by its SHA-256: keys with spaces, braces or too many bytes
// (after the scope) stay usable and distinct.
func scopedID(scope, key string) string {
	id := scope + ":" + key
	if _, err := dedup.NewKey(Namespace, id); err == nil {
		return id
	}
	sum := sha256.Sum256([]byte(key))
	id = scope + ":sha256-" + hex.EncodeToString(sum[:])
	if _, err := dedup.NewKey(Namespace, id); err == nil {
		return id
	}
	// A scope too long or odd itself: hash both, NUL-separated so that no
	// two (scope, key) pairs share an input.
	sum = sha256.Sum256([]byte(scope + "\x00" + key))
	return "sha256-" + hex.EncodeToString(sum[:])
}

// Do runs do at most once for key in scope while the store keeps the
// record; fp identifies the request for the mismatch check (equal requests,
// equal fp). Without a key, do simply runs. The response of do is stored
// when it is a 2xx (and not NoReplay); after any other the record is
// removed. A stored response is recorded even when ctx has ended: the work
// is done.
func (g *Guard) Do(ctx context.Context, scope, key, fp string, do func(context.Context) Response) Response {
	resp, _ := g.Send(ctx, scope, key, fp, do, nil)
	return resp
}

// Send is Do for a handler that answers as soon as it can: a fresh 2xx
// that is to be stored goes to send while it is being stored in the
// background, one store round trip off the request's latency (Drain waits
// for the store). Send returns once send has, with sent true; every other
// answer is returned unsent. From then on this process answers a retry
// from memory, and another replica's retry waits up to InFlightWait for
// the stored replay. A nil send is Do.
func (g *Guard) Send(ctx context.Context, scope, key, fp string, do func(context.Context) Response, send func(Response)) (resp Response, sent bool) {
	if key == "" {
		return do(ctx), false
	}
	k := ReplayKey(scope, key)
	claimed := time.Now()
	if resp, ok := g.replays.get(k, fp, claimed); ok {
		g.decide(ctx, k, dedup.Duplicate, "response replayed")
		return resp, false
	}
	c, err := g.claimWaiting(ctx, k, fp)
	if err != nil {
		g.decide(ctx, k, storage.Errored, err.Error())
		return problem(http.StatusServiceUnavailable, kindUnavailable, "Service unavailable", key, 1,
			"the idempotency store did not answer: nothing was done; retry with the same Idempotency-Key"), false
	}
	switch c.Outcome {
	case dedup.Duplicate:
		var stored Response
		if err := json.Unmarshal(c.Result, &stored); err != nil || stored.Status == 0 {
			g.opts.OnError(ctx, "stored response unreadable", k, err)
			return problem(http.StatusInternalServerError, kindInternal, "Internal error", "", 0, "the stored response cannot be replayed"), false
		}
		g.replays.put(k, fp, stored, claimed)
		g.decide(ctx, k, dedup.Duplicate, "response replayed")
		return replayed(stored), false
	case dedup.InProgress:
		g.decide(ctx, k, dedup.InProgress, "a request with this key is in flight")
		return problem(http.StatusConflict, kindInFlight, "A request with this Idempotency-Key is in progress", key,
			Seconds(time.Until(c.LeaseUntil)),
			"the first request with this Idempotency-Key has not finished; retry after the given seconds, when its claim ends at the latest"), false
	case dedup.Conflict:
		g.decide(ctx, k, dedup.Conflict, "another request body under the same key")
		return problem(http.StatusUnprocessableEntity, kindMismatch, "Idempotency-Key reused with another request", key, 0,
			"this Idempotency-Key was used with another request body; use a new key for a new request"), false
	}
	g.decide(ctx, k, dedup.Acquired, "")
	handedOff := false
	defer func() { // even if do panics
		if !handedOff {
			g.claims.drop(c.Hold)
		}
	}()

	resp = do(ctx)
	if resp.Status < 200 || resp.Status >= 300 || resp.NoReplay {
		bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.opts.Timeout)
		defer cancel()
		g.unclaim(bg, c.Hold, claimed, fmt.Sprintf("status %d", resp.Status))
		return resp, false
	}
	b, err := json.Marshal(resp)
	if err != nil { // a Response always marshals
		g.claims.doubt(k)
		g.opts.OnError(ctx, "storing the response for replay failed", k, err)
		return resp, false
	}
	if send == nil {
		if g.complete(ctx, c.Hold, b) {
			g.replays.put(k, fp, resp, claimed)
		}
		return resp, false
	}
	// The response is this key's answer from now: a retry here is replayed
	// it, even while (or if) storing it fails. Storing starts first, so a
	// client slow to read does not hold it up; the handler returns once the
	// response is written, and its connection serves the client's next
	// request meanwhile.
	g.replays.put(k, fp, resp, claimed)
	handedOff = true
	g.tails.Go(func() {
		defer g.claims.drop(c.Hold)
		g.complete(ctx, c.Hold, b)
	})
	send(resp)
	return resp, true
}

// complete stores the response b under h, even when ctx has ended: the
// work is done. On failure the client still has its answer; a retry after
// the lease runs again (or at once here: the key is in doubt).
func (g *Guard) complete(ctx context.Context, h storage.Hold, b []byte) bool {
	bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.opts.Timeout)
	defer cancel()
	if err := g.store.Complete(bg, h, b, 0); err != nil {
		g.claims.doubt(h.Key)
		g.opts.OnError(ctx, "storing the response for replay failed", h.Key, err)
		return false
	}
	return true
}

// Drain waits until every response sent ahead of its storing (Send) is
// stored, or ctx ends. Call it once the http.Server has shut down, before
// the process exits: a response not yet stored would leave its key
// answered 409 for the claim's lease.
func (g *Guard) Drain(ctx context.Context) error {
	done := make(chan struct{})
	go func() { g.tails.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// claimWaiting is claim that, meeting another request in flight, waits up
// to InFlightWait for its answer: the first request's response may be on
// its way while its replay is being stored (Send).
func (g *Guard) claimWaiting(ctx context.Context, k dedup.Key, fp string) (storage.Claim, error) {
	c, err := g.claim(ctx, k, fp)
	deadline := time.Now().Add(g.opts.InFlightWait)
	for pause := 2 * time.Millisecond; err == nil && c.Outcome == dedup.InProgress && time.Now().Add(pause).Before(deadline); pause *= 2 {
		select {
		case <-ctx.Done():
			return c, nil
		case <-time.After(pause):
		}
		c, err = g.claim(ctx, k, fp)
	}
	return c, err
}

func (g *Guard) decide(ctx context.Context, k dedup.Key, o dedup.Decision, reason string) {
	g.opts.Observer(ctx, dedup.Event{Op: "claim", Key: k, Outcome: o, Reason: reason})
}

func problem(status int, kind, title, key string, retryAfter int, detail string) Response {
	return ProblemResponse(Problem{Type: ProblemType + kind, Title: title, Status: status, Key: key, RetryAfter: retryAfter, Detail: detail})
}
