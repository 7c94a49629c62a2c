package httpidem

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strings"
)

// MiddlewareOptions configures Guard.Middleware.
type MiddlewareOptions struct {
	// Required answers a request without a key 400. Default: false, such a
	// request simply runs.
	Required bool
	// Scope names whose keys a request's are, e.g. the authenticated
	// client: another scope's same key is another request. It must hold
	// no secret (it is part of a Redis key). Default: one scope for all.
	Scope func(*http.Request) string
	// MaxBodyBytes caps the request body, which is read whole to
	// fingerprint it. Default: 1 MiB.
	MaxBodyBytes int64
}

// Middleware wraps a handler so that each request with an Idempotency-Key
// runs at most once (see Do). Requests are the same when method, path and
// body bytes are. The handler's response is buffered whole, then written,
// and stored when it is a 2xx (the store's write overlaps the response
// going out: Send): mount it on routes whose answers are small
// and whose effects must not repeat (a POST that charges, sends, creates).
func (g *Guard) Middleware(o MiddlewareOptions) func(http.Handler) http.Handler {
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = 1 << 20
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			key, err := Key(r)
			if err != nil {
				problem(http.StatusBadRequest, "bad-idempotency-key", "Bad Idempotency-Key", "", 0, err.Error()).Write(w)
				return
			}
			if key == "" {
				if o.Required {
					problem(http.StatusBadRequest, "idempotency-key-missing", "Idempotency-Key required", "", 0,
						"send an Idempotency-Key header: a unique string per operation, the same on its retries").Write(w)
					return
				}
				next.ServeHTTP(w, r)
				return
			}
			body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, o.MaxBodyBytes))
			if err != nil {
				var tooLarge *http.MaxBytesError
				if errors.As(err, &tooLarge) {
					problem(http.StatusRequestEntityTooLarge, "body-too-large", "Request body too large", "", 0,
						fmt.Sprintf("the body may be at most %d bytes", o.MaxBodyBytes)).Write(w)
					return
				}
				problem(http.StatusBadRequest, "bad-request", "Bad request", "", 0, "reading the body failed").Write(w)
				return
			}
			scope := ""
			if o.Scope != nil {
				scope = o.Scope(r)
			}
			h := sha256.New()
			fmt.Fprintf(h, "%s %s\n", r.Method, r.URL.Path)
			h.Write(body)
			fp := hex.EncodeToString(h.Sum(nil))
			route := scope + "/" + r.Method + " " + r.URL.Path
			resp, sent := g.Send(r.Context(), route, key, fp, func(ctx context.Context) Response {
				rec := &recorder{header: http.Header{}}
				r2 := r.WithContext(ctx)
				r2.Body = io.NopCloser(bytes.NewReader(body))
				next.ServeHTTP(rec, r2)
				return rec.response()
			}, func(resp Response) { resp.Flush(w) })
			if !sent {
				resp.Write(w)
			}
		})
	}
}

// recorder buffers a handler's response.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (c *recorder) Header() http.Header { return c.header }

func (c *recorder) WriteHeader(status int) {
	if c.status == 0 {
		c.status = status
	}
}

func (c *recorder) Write(b []byte) (int, error) {
	c.WriteHeader(http.StatusOK)
	return c.body.Write(b)
}

func (c *recorder) response() Response {
	c.WriteHeader(http.StatusOK)
	h := make(map[string]string, len(c.header))
	for name, vs := range maps.All(c.header) {
		if !strings.EqualFold(name, "Content-Length") {
			h[name] = strings.Join(vs, ", ")
		}
	}
	return Response{Status: c.status, Header: h, Body: c.body.String()}
}
