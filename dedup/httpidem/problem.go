package httpidem

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ProblemType prefixes the type URI of every problem document onceq writes:
// a link to the problem's section of the docs, which says what to do.
const ProblemType = "https://github.com/onceq/onceq/blob/main/docs/problems.md#"

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

// Response is a complete HTTP response, built before it is written so that
// it can be stored for replay; its JSON is the stored form.
type Response struct {
	Status int               `json:"status"`
	Header map[string]string `json:"header,omitempty"`
	// Body is a string, not raw JSON: encoding/json would compact raw JSON,
	// and a replay must be byte-identical.
	Body string `json:"body"`
	// NoReplay keeps a 2xx from being stored: the next request with the
	// key runs afresh.
	NoReplay bool `json:"-"`
}

// Write writes resp to w.
func (resp Response) Write(w http.ResponseWriter) {
	h := w.Header()
	for k, v := range resp.Header {
		h.Set(k, v)
	}
	h.Set("Content-Length", strconv.Itoa(len(resp.Body)))
	w.WriteHeader(resp.Status)
	w.Write([]byte(resp.Body))
}

// Flush writes resp to w and sends it to the client at once, before the
// handler returns (Guard.Send). Its Content-Length lets the client read it
// whole without waiting for the handler's end.
func (resp Response) Flush(w http.ResponseWriter) {
	resp.Write(w)
	http.NewResponseController(w).Flush() // a writer that cannot flush sends it at the end
}

// ProblemResponse is p as an application/problem+json response, with
// Retry-After when p has one.
func ProblemResponse(p Problem) Response {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(p) // a Problem always marshals
	resp := Response{Status: p.Status, Header: map[string]string{"Content-Type": "application/problem+json"}, Body: b.String()}
	if p.RetryAfter > 0 {
		resp.Header["Retry-After"] = strconv.Itoa(p.RetryAfter)
	}
	return resp
}

// Seconds rounds d up to whole seconds, at least 1: a Retry-After of 0
// would invite an immediate retry that is refused again.
func Seconds(d time.Duration) int {
	s := int((d + time.Second - 1) / time.Second)
	return max(s, 1)
}
