package api

import (
	"net/http"
	"strings"
)

// handle registers h for pattern's method and, for that path with any
// other method, a 405 problem with Allow (RFC 9110 §15.5.6). The mux would
// write a plain-text 405 itself, but only where no catch-all matches.
func handle(mux *http.ServeMux, method, path string, h http.Handler) {
	mux.Handle(method+" "+path, h)
	allow := method
	if method == http.MethodGet {
		allow = "GET, HEAD"
	}
	mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allow)
		problem(http.StatusMethodNotAllowed, probMethod, r.Method+" is not allowed here; use "+allow).write(w)
	})
}

// Problems makes every error response under h a problem document: one a
// handler writes itself (the mux's 404 and 405, http.Error, a metrics or
// readiness handler) is rewritten, keeping its status and headers such as
// Allow, Retry-After and WWW-Authenticate. Wrap the whole server's handler
// with it; wrap its listener with Listener for the errors net/http writes
// before any handler runs.
func Problems(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(&problemWriter{ResponseWriter: w}, r)
	})
}

type problemWriter struct {
	http.ResponseWriter
	swallow bool // the handler's own error body is replaced
	wrote   bool
}

func (p *problemWriter) WriteHeader(status int) {
	if p.wrote {
		return
	}
	p.wrote = true
	h := p.Header()
	if status < 400 || strings.HasPrefix(h.Get("Content-Type"), "application/problem+json") {
		p.ResponseWriter.WriteHeader(status)
		return
	}
	p.swallow = true
	h.Del("Content-Length")
	h.Del("X-Content-Type-Options")
	resp := problem(status, kindOf(status), "")
	for k, v := range resp.Header {
		h.Set(k, v)
	}
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Length", itoa(len(resp.Body)))
	p.ResponseWriter.WriteHeader(status)
	p.ResponseWriter.Write([]byte(resp.Body))
}

func (p *problemWriter) Write(b []byte) (int, error) {
	if !p.wrote {
		p.WriteHeader(http.StatusOK)
	}
	if p.swallow {
		return len(b), nil
	}
	return p.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (flush, deadlines).
func (p *problemWriter) Unwrap() http.ResponseWriter { return p.ResponseWriter }

// Flush keeps streaming handlers (none today) working through the wrapper.
func (p *problemWriter) Flush() {
	if f, ok := p.ResponseWriter.(http.Flusher); ok && !p.swallow {
		f.Flush()
	}
}

// kindOf names a status that some other handler chose.
func kindOf(status int) kind {
	switch status {
	case http.StatusBadRequest:
		return probBadRequest
	case http.StatusUnauthorized:
		return probUnauthorized
	case http.StatusNotFound:
		return probNotFound
	case http.StatusMethodNotAllowed:
		return probMethod
	case http.StatusRequestEntityTooLarge:
		return probTooLarge
	case http.StatusRequestHeaderFieldsTooLarge:
		return probHeadersTooLarge
	case http.StatusNotImplemented:
		return probNotImplemented
	case http.StatusServiceUnavailable:
		return probUnavailable
	case http.StatusInternalServerError:
		return probInternal
	}
	text := http.StatusText(status)
	if text == "" {
		text = "Error"
	}
	return kind{"http-" + itoa(status), text}
}
