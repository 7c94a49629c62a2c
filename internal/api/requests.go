package api

import (
	"net/http"
	"time"
)

// Requests is what counts the API's answers (observe.HTTP in producer
// serve): route is the pattern that matched ("POST /v1/payments"), code
// the status sent.
type Requests interface {
	Zero(route string, codes []int)
	Observe(route string, code int, took time.Duration)
}

type noRequests struct{}

func (noRequests) Zero(string, []int)                 {}
func (noRequests) Observe(string, int, time.Duration) {}

// answers are the statuses a route with a method can answer; a route
// without one (the 405 and 404 catch-alls) answers routeless.
var (
	answers   = []int{200, 202, 400, 401, 403, 404, 408, 409, 413, 415, 422, 429, 500, 503}
	routeless = []int{404, 405}
)

// routes is the API's mux, starting each pattern's series as it is
// registered, so that the patterns are written once.
type routes struct {
	*http.ServeMux
	zero func(route string, codes []int)
}

func (m *routes) Handle(pattern string, h http.Handler) {
	m.ServeMux.Handle(pattern, h)
	if _, _, hasMethod := cutMethod(pattern); hasMethod {
		m.zero(pattern, answers)
	} else {
		m.zero(pattern, routeless)
	}
}

func (m *routes) HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request)) {
	m.Handle(pattern, http.HandlerFunc(h))
}

func cutMethod(pattern string) (string, string, bool) {
	for i, c := range pattern {
		if c == ' ' {
			return pattern[:i], pattern[i+1:], true
		}
		if c == '/' {
			break
		}
	}
	return "", pattern, false
}

// statusWriter remembers the status sent.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) code() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}

// Unwrap lets http.ResponseController reach the connection.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
