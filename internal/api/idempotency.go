package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/onceq/onceq/dedup/httpidem"
)

// ReplayNamespace is the dedup namespace of HTTP replay records; their id
// is "<principal>/<route>:<Idempotency-Key>".
const ReplayNamespace = httpidem.Namespace

// ReplayedHeader marks a response replayed from an earlier request.
const ReplayedHeader = httpidem.ReplayedHeader

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

// fingerprints remembers, per process, the fingerprint the catalog gave an
// ingest body under a (caller, route, Idempotency-Key): a retry of the same
// bytes, the usual replay, skips decoding and hashing the job, which is
// most of a replay's cost. Entries live as long as the replay cache's (a
// longer life would only rebuild the job), at most maxFingerprints of them.
type fingerprints struct {
	mu  sync.Mutex
	ttl time.Duration
	m   map[fingerprintKey]rawFingerprint
}

type fingerprintKey struct{ scope, key string }

type rawFingerprint struct {
	sum   [sha256.Size]byte // of the raw body
	fp    string
	until time.Time
}

const maxFingerprints = 10_000

// get returns the fingerprint of raw under (scope, key), if known.
func (f *fingerprints) get(scope, key string, raw []byte, now time.Time) (string, bool) {
	if f.ttl <= 0 {
		return "", false
	}
	sum := sha256.Sum256(raw)
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.m[fingerprintKey{scope, key}]
	if !ok || now.After(e.until) || e.sum != sum {
		return "", false
	}
	return e.fp, true
}

func (f *fingerprints) put(scope, key string, raw []byte, fp string, now time.Time) {
	if f.ttl <= 0 {
		return
	}
	sum := sha256.Sum256(raw)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = map[fingerprintKey]rawFingerprint{}
	}
	if len(f.m) >= maxFingerprints {
		for old := range f.m { // any entry: map order is random enough
			delete(f.m, old)
			break
		}
	}
	f.m[fingerprintKey{scope, key}] = rawFingerprint{sum: sum, fp: fp, until: now.Add(f.ttl)}
}
