package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/httpidem"
)

// ReplayNamespace is the dedup namespace of HTTP replay records; their id
// is "<principal>/<route>:<Idempotency-Key>".
const ReplayNamespace = httpidem.Namespace

// ReplayedHeader marks a response replayed from an earlier request.
const ReplayedHeader = httpidem.ReplayedHeader

// ReplayKey is the dedup key under which the response to principal's
// request on route ("payments", "emails", "scans", "webhooks/<source>") with
// Idempotency-Key key is stored. Keys are the client's: another principal
// using the same key neither sees nor collides with this one.
func ReplayKey(principal, route, key string) onceq.Key {
	return httpidem.ReplayKey(principal+"/"+route, key)
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

// once runs do at most once per (principal, route, key) while the replay
// store keeps the record (httpidem.Guard.Send): a completed request's
// response is replayed, a request in flight is a 409, another request under
// the same key a 422. Only 2xx responses are stored; a fresh one goes to
// send (when not nil) before it is stored, and sent says so. Without a
// key, do simply runs.
func (s *server) once(ctx context.Context, route, key, fp string, do func(context.Context) response,
	send func(httpidem.Response)) (out response, sent bool) {
	var fresh response
	stored, sent := s.guard.Send(ctx, principal(ctx)+"/"+route, key, fp, func(ctx context.Context) httpidem.Response {
		fresh = do(ctx)
		return fresh.Response
	}, send)
	if fresh.Status == 0 { // answered from the record, or refused
		return response{Response: stored}, sent
	}
	return fresh, sent
}
