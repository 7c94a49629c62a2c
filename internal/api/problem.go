package api

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/onceq/onceq/dedup/httpidem"
)

// ProblemType prefixes the type URI of every problem document onceq writes.
const ProblemType = httpidem.ProblemType

// Problem is an RFC 9457 problem document (httpidem's, which writes the
// Idempotency-Key answers).
type Problem = httpidem.Problem

// Problem kinds: the slug of the type URI and its title.
var (
	probBadRequest      = kind{"bad-request", "Bad request"}
	probBadKey          = kind{"bad-idempotency-key", "Bad Idempotency-Key"}
	probUnauthorized    = kind{"unauthorized", "Unauthorized"}
	probBadSignature    = kind{"bad-signature", "Bad webhook signature"}
	probNotFound        = kind{"not-found", "Not found"}
	probNotOperator     = kind{"operator-only", "Only an operator may do this"}
	probRunning         = kind{"job-running", "The job is running"}
	probTooLarge        = kind{"body-too-large", "Request body too large"}
	probMediaType       = kind{"unsupported-media-type", "Unsupported media type"}
	probInvalid         = kind{"invalid-payload", "Invalid payload"}
	probConflict        = kind{"job-key-conflict", "Job key already used for other content"}
	probPaymentIDHeld   = kind{"payment-id-held", "Payment id held by another client"}
	probIDHeld          = kind{"id-held", "Job id held by another client"}
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

// response is a complete HTTP response (httpidem.Response, what is
// stored for replay) and what the handler still needs of it.
type response struct {
	httpidem.Response
	// settle, if set, waits for work that overlaps the response going out
	// and storing it for replay (the job's owner record). Never stored.
	settle func()
	// accepted is the job a fresh 202 or 200 is about, which the caller may
	// read (Prefer: wait waits for it). Never stored: a replay has none.
	accepted *Accepted
}

func (resp response) write(w http.ResponseWriter) { resp.Response.Write(w) }

func jsonResponse(status int, v any) response {
	b, err := marshal(v)
	if err != nil { // our own types always marshal
		return problem(http.StatusInternalServerError, probInternal, "encoding the response failed")
	}
	return response{Response: httpidem.Response{Status: status, Header: map[string]string{"Content-Type": "application/json"}, Body: b}}
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

func problemOf(p Problem) response { return response{Response: httpidem.ProblemResponse(p)} }

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

// seconds rounds d up to whole seconds, at least 1.
func seconds(d time.Duration) int { return httpidem.Seconds(d) }
