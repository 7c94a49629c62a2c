package api

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ProblemType prefixes the type URI of every problem document onceq writes.
const ProblemType = "urn:onceq:problem:"

// Problem is an RFC 9457 problem document. Extensions carry what a client
// can act on (the idempotency key, the seconds to wait).
type Problem struct {
	Type       string `json:"type"`
	Title      string `json:"title"`
	Status     int    `json:"status"`
	Detail     string `json:"detail,omitempty"`
	Key        string `json:"key,omitempty"`
	RetryAfter int    `json:"retry_after,omitempty"`
}

// Problem kinds: the slug of the type URI and its title.
var (
	probBadRequest      = kind{"bad-request", "Bad request"}
	probBadKey          = kind{"bad-idempotency-key", "Bad Idempotency-Key"}
	probMissingKey      = kind{"idempotency-key-missing", "Idempotency-Key required"}
	probUnauthorized    = kind{"unauthorized", "Unauthorized"}
	probBadSignature    = kind{"bad-signature", "Bad webhook signature"}
	probNotFound        = kind{"not-found", "Not found"}
	probInFlight        = kind{"request-in-progress", "A request with this Idempotency-Key is in progress"}
	probTooLarge        = kind{"body-too-large", "Request body too large"}
	probMediaType       = kind{"unsupported-media-type", "Unsupported media type"}
	probInvalid         = kind{"invalid-payload", "Invalid payload"}
	probMismatch        = kind{"idempotency-key-reused", "Idempotency-Key reused with another request"}
	probConflict        = kind{"job-key-conflict", "Job key already used for other content"}
	probThrottled       = kind{"throttled", "Too many requests"}
	probUnavailable     = kind{"unavailable", "Service unavailable"}
	probInternal        = kind{"internal", "Internal error"}
	probMethod          = kind{"method-not-allowed", "Method not allowed"}
	probHeadersTooLarge = kind{"headers-too-large", "Request header fields too large"}
	probNotImplemented  = kind{"not-implemented", "Not implemented"}
	probBodyBudget      = kind{"body-budget-exhausted", "Too many unauthenticated bodies in flight"}
	probBodyTimeout     = kind{"body-timeout", "Request body too slow"}
)

type kind struct{ slug, title string }

// response is a complete HTTP response, built before it is written so that
// it can be stored for replay.
type response struct {
	Status int               `json:"status"`
	Header map[string]string `json:"header,omitempty"`
	// Body is a string, not raw JSON: encoding/json would compact raw JSON,
	// and a replay must be byte-identical.
	Body string `json:"body"`
	// settle, if set, waits for work that must end before the response is
	// written but may overlap storing it for replay. Never stored.
	settle func() `json:"-"`
	// accepted is the job a fresh 202 or 200 is about, which the caller may
	// read (Prefer: wait waits for it). Never stored: a replay has none.
	accepted *Accepted `json:"-"`
	// foreign marks the answer about another client's global key: never
	// stored for replay, so that a request that came before its own job's
	// owner record was written is answered afresh when retried.
	foreign bool `json:"-"`
}

func (resp response) write(w http.ResponseWriter) {
	h := w.Header()
	for k, v := range resp.Header {
		h.Set(k, v)
	}
	h.Set("Content-Length", strconv.Itoa(len(resp.Body)))
	w.WriteHeader(resp.Status)
	w.Write([]byte(resp.Body))
}

func jsonResponse(status int, v any) response {
	b, err := marshal(v)
	if err != nil { // our own types always marshal
		return problem(http.StatusInternalServerError, probInternal, "encoding the response failed")
	}
	return response{Status: status, Header: map[string]string{"Content-Type": "application/json"}, Body: b}
}

// marshal is JSON with a trailing newline (for curl users) and without
// HTML escaping: "<" reads as "<", and nothing here is embedded in HTML.
func marshal(v any) (string, error) {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	return b.String(), nil
}

func problem(status int, k kind, detail string) response {
	return problemOf(Problem{Type: ProblemType + k.slug, Title: k.title, Status: status, Detail: detail})
}

func problemOf(p Problem) response {
	b, _ := marshal(p) // a Problem always marshals
	resp := response{Status: p.Status, Header: map[string]string{"Content-Type": "application/problem+json"}, Body: b}
	if p.RetryAfter > 0 {
		resp.Header["Retry-After"] = strconv.Itoa(p.RetryAfter)
	}
	return resp
}

// unavailable is the 503 for a Redis failure or time-out; detail tells the
// client what became of its request. The cause goes to the log, not to the
// client.
func unavailable(detail string) response {
	return problemOf(Problem{Type: ProblemType + probUnavailable.slug, Title: probUnavailable.title,
		Status: http.StatusServiceUnavailable, Detail: "the job store did not answer: " + detail, RetryAfter: 1})
}

// outcomeUnknown is the detail of a 503 after the enqueue was sent: it may
// have happened. A retry under a new key could run the job twice.
const outcomeUnknown = "the outcome is unknown (the job may have been enqueued); retry with the same Idempotency-Key, or the same body, not a new key"

// seconds rounds d up to whole seconds, at least 1: a Retry-After of 0
// would invite an immediate retry that is refused again.
func seconds(d time.Duration) int {
	s := int((d + time.Second - 1) / time.Second)
	return max(s, 1)
}
