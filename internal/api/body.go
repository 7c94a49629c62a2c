package api

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/httpidem"
)

// readBody reads the whole body under the size limit. A problem response is
// returned when the body cannot be had.
func (s *server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *response) {
	limit := s.opts.MaxBodyBytes
	if r.ContentLength > limit {
		resp := problem(http.StatusRequestEntityTooLarge, probTooLarge, fmt.Sprintf("the body may be at most %d bytes", limit))
		return nil, &resp
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			resp := problem(http.StatusRequestEntityTooLarge, probTooLarge, fmt.Sprintf("the body may be at most %d bytes", limit))
			return nil, &resp
		}
		resp := problem(http.StatusBadRequest, probBadRequest, "reading the body failed")
		return nil, &resp
	}
	return b, nil
}

// checkJSON wants Content-Type application/json (a charset parameter, if
// any, must be utf-8: JSON is UTF-8).
func checkJSON(r *http.Request) *response {
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err == nil && mt == "application/json" {
		if cs, ok := params["charset"]; !ok || strings.EqualFold(cs, "utf-8") {
			return nil
		}
	}
	resp := problem(http.StatusUnsupportedMediaType, probMediaType, "send Content-Type: application/json")
	return &resp
}

// refused maps a catalog error: a body that is not the expected JSON
// (syntax, unknown fields, trailing data, wrong types) and well-formed
// content the task refuses are both 400s, told apart by the problem type.
func refused(err error) response {
	if errors.Is(err, dedup.ErrMalformed) {
		msg := err.Error()
		if _, after, ok := strings.Cut(msg, dedup.ErrMalformed.Error()+": "); ok {
			msg = after
		}
		return problem(http.StatusBadRequest, probBadRequest, "the body is not the expected JSON: "+msg)
	}
	return invalid(err)
}

// invalid turns the catalog's validation error into a 400, as malformed
// JSON is: either way the request can never succeed as sent, and 422 stays
// the draft's "this key was used for other content".
func invalid(err error) response {
	return problem(http.StatusBadRequest, probInvalid, strings.TrimPrefix(strings.TrimPrefix(err.Error(), "onceq: "), "tasks: "))
}

// idempotencyKey reads the request's Idempotency-Key (httpidem.Key): ""
// without one, a 400 problem when it is malformed.
func idempotencyKey(r *http.Request) (string, *response) {
	key, err := httpidem.Key(r)
	if err != nil {
		resp := problem(http.StatusBadRequest, probBadKey, err.Error())
		return "", &resp
	}
	return key, nil
}
