package api

import (
	"net/http"
	"strings"
	"unicode/utf8"
)

// handle registers h for pattern's method and, for that path with any
// other method, a 405 problem with Allow (RFC 9110 §15.5.6). The mux would
// write a plain-text 405 itself, but only where no catch-all matches.
func handle(mux *routes, method, path string, h http.Handler) {
	handleEach(mux, path, route{method, h})
}

// route is one method's handler of a path.
type route struct {
	method string
	h      http.Handler
}

// handleEach is handle for a path served under several methods.
func handleEach(mux *routes, path string, rs ...route) {
	var allow []string
	for _, r := range rs {
		mux.Handle(r.method+" "+path, r.h)
		allow = append(allow, r.method)
		if r.method == http.MethodGet {
			allow = append(allow, http.MethodHead)
		}
	}
	list := strings.Join(allow, ", ")
	mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", list)
		problem(http.StatusMethodNotAllowed, probMethod, r.Method+" is not allowed here; use "+list).write(w)
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
		pw := &problemWriter{ResponseWriter: w}
		h.ServeHTTP(pw, r)
		pw.finish()
	})
}

// maxDetail bounds the text of a rewritten error kept as its detail.
const maxDetail = 200

type problemWriter struct {
	http.ResponseWriter
	status int             // an error being rewritten; 0 otherwise
	text   strings.Builder // its plain text, the problem's detail
	wrote  bool
}

func (p *problemWriter) WriteHeader(status int) {
	if p.wrote {
		return
	}
	p.wrote = true
	if status < 400 || strings.HasPrefix(p.Header().Get("Content-Type"), "application/problem+json") {
		p.ResponseWriter.WriteHeader(status)
		return
	}
	p.status = status
}

func (p *problemWriter) Write(b []byte) (int, error) {
	if !p.wrote {
		p.WriteHeader(http.StatusOK)
	}
	if p.status != 0 {
		if p.text.Len() < maxDetail {
			p.text.Write(b[:min(len(b), maxDetail-p.text.Len())])
		}
		return len(b), nil
	}
	return p.ResponseWriter.Write(b)
}

// finish writes the problem for a rewritten error once the handler is done.
func (p *problemWriter) finish() {
	if p.status == 0 {
		return
	}
	detail := strings.TrimSpace(p.text.String())
	if !utf8.ValidString(detail) || strings.ContainsFunc(detail, func(r rune) bool { return r < ' ' }) {
		detail = ""
	}
	resp := problem(p.status, kindOf(p.status), detail)
	h := p.Header()
	h.Del("Content-Length")
	h.Set("X-Content-Type-Options", "nosniff")
	resp.write(p.ResponseWriter)
}

// Unwrap lets http.ResponseController reach the connection (flush, deadlines).
func (p *problemWriter) Unwrap() http.ResponseWriter { return p.ResponseWriter }

// Flush sends what was written (a response going out before its handler's
// last writes: httpidem.Guard.Send) through the wrappers below, unless an
// error is being rewritten.
func (p *problemWriter) Flush() {
	if p.status == 0 {
		http.NewResponseController(p.ResponseWriter).Flush()
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
