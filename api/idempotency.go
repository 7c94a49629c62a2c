package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/onceq/onceq"
)

// ReplayNamespace is the dedup namespace of HTTP replay records; their id
// is "<route>:<Idempotency-Key>".
const ReplayNamespace = "http"

// ReplayedHeader marks a response replayed from an earlier request.
const ReplayedHeader = "Idempotent-Replayed"

// ReplayKey is the dedup key under which the response to principal's
// request on route ("payments", "emails", "scans", "webhooks/<source>") with
// Idempotency-Key key is stored. Keys are the client's: another principal
// using the same key neither sees nor collides with this one.
func ReplayKey(principal, route, key string) onceq.Key {
	// scopedID always yields a valid id.
	return onceq.Key{Namespace: ReplayNamespace, ID: scopedID(principal+"/"+route, key)}
}

// scopedID is "prefix:key" when that is a valid dedup id, else the key is
// replaced by its SHA-256: keys with spaces, braces or too many bytes
// (after the prefix) stay usable and distinct.
func scopedID(prefix, key string) string {
	id := prefix + ":" + key
	if _, err := onceq.NewKey(ReplayNamespace, id); err == nil {
		return id
	}
	sum := sha256.Sum256([]byte(key))
	id = prefix + ":sha256-" + hex.EncodeToString(sum[:])
	if _, err := onceq.NewKey(ReplayNamespace, id); err == nil {
		return id
	}
	// A prefix too long or odd itself: hash both, NUL-separated so that no
	// two (prefix, key) pairs share an input.
	sum = sha256.Sum256([]byte(prefix + "\x00" + key))
	return "sha256-" + hex.EncodeToString(sum[:])
}

// fingerprint identifies a request for the mismatch check: method, route,
// the job key and the job's fingerprint, which the catalog takes from the
// decoded, validated payload. Bodies that decode to the same value are the
// same request whatever their key order or spacing; the strict decoder
// already refused bodies whose meaning is ambiguous (duplicate or
// case-variant names).
func fingerprint(method, route, jobKey, jobFingerprint string) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s %s\n%s\n%s", method, route, jobKey, jobFingerprint)
	return hex.EncodeToString(h.Sum(nil))
}

// once runs do at most once per (principal, route, key) while the store
// keeps the record: a completed request's response is replayed, a request
// in flight is a 409, another request under the same key a 422. Only 2xx
// responses are stored; after a 429 or 5xx the record is removed, so a
// retry with the same or a corrected body runs at once. Without a key, do
// simply runs.
func (s *server) once(ctx context.Context, route, key, fp string, do func(context.Context) response) response {
	if key == "" {
		return do(ctx)
	}
	k := ReplayKey(principal(ctx), route, key)
	claimed := time.Now()
	if resp, ok := s.replays.get(k, fp, claimed); ok {
		s.decide(ctx, k, "duplicate", "response replayed")
		return resp
	}
	c, err := s.claim(ctx, k, fp)
	if err != nil {
		s.decide(ctx, k, "error", err.Error())
		s.opts.Log.Warn("api: idempotency claim failed", zap.String("key", k.String()), zap.Error(err))
		return unavailable("nothing was enqueued; retry with the same Idempotency-Key")
	}
	switch c.Outcome {
	case onceq.Duplicate:
		var stored response
		if err := json.Unmarshal(c.Result, &stored); err != nil || stored.Status == 0 {
			s.opts.Log.Error("api: stored response unreadable", zap.String("key", k.String()), zap.Error(err))
			return problem(http.StatusInternalServerError, probInternal, "the stored response cannot be replayed")
		}
		s.replays.put(k, fp, stored, claimed)
		s.decide(ctx, k, "duplicate", "response replayed")
		return replayed(stored)
	case onceq.InProgress:
		s.decide(ctx, k, "in_progress", "a request with this key is in flight")
		return problemOf(Problem{Type: ProblemType + probInFlight.slug, Title: probInFlight.title,
			Status: http.StatusConflict, Key: key, RetryAfter: seconds(time.Until(c.LeaseUntil)),
			Detail: "the first request with this Idempotency-Key has not finished; retry after the given seconds, when its claim ends at the latest"})
	case onceq.Conflict:
		s.decide(ctx, k, "mismatch", "another request body under the same key")
		return problemOf(Problem{Type: ProblemType + probMismatch.slug, Title: probMismatch.title,
			Status: http.StatusUnprocessableEntity, Key: key,
			Detail: "this Idempotency-Key was used with another request body; use a new key for a new request"})
	}
	s.decide(ctx, k, "claimed", "")
	defer s.claims.drop(c.Hold) // even if do panics

	resp := do(ctx)
	// Record the outcome even when the request's own time ran out: the work is done.
	bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.Timeout)
	defer cancel()
	if resp.Status >= 200 && resp.Status < 300 && !resp.foreign {
		b, err := json.Marshal(resp)
		if err == nil {
			err = s.opts.Store.Complete(bg, c.Hold, b, 0)
		}
		if err == nil {
			s.replays.put(k, fp, resp, claimed)
		}
		if err != nil {
			// The client still gets its answer; a retry after the lease
			// runs again and meets the producer's own deduplication.
			s.claims.doubt(k)
			s.opts.Log.Warn("api: storing the response for replay failed", zap.String("key", k.String()), zap.Error(err))
		}
		return resp
	}
	s.unclaim(bg, c.Hold, claimed, fmt.Sprintf("status %d", resp.Status))
	return resp
}

func (s *server) decide(ctx context.Context, k onceq.Key, o string, reason string) {
	s.opts.Observer(ctx, onceq.Event{Op: "claim", Key: k, Outcome: o, Reason: reason})
}
