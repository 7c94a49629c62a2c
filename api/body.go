package api

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/dunglas/httpsfv"

	"github.com/onceq/onceq"
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
	if errors.Is(err, onceq.ErrMalformed) {
		msg := err.Error()
		if _, after, ok := strings.Cut(msg, onceq.ErrMalformed.Error()+": "); ok {
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

// maxKeyBytes bounds an Idempotency-Key header.
const maxKeyBytes = 255 // the longest key id onceq takes as it is

// idempotencyKey reads Idempotency-Key or X-Idempotency-Key: "" without
// either. The draft (§2.1) makes the value a Structured Field String (RFC
// 8941 §3.3.3): quoted, with \" and \\ escaped, printable ASCII only;
// parameters after it are ignored. As a documented leniency a bare value
// of printable ASCII without space, quote, comma, semicolon or backslash
// (a UUID as most clients send it) is taken as it is.
func idempotencyKey(r *http.Request) (string, *response) {
	bad := func(detail string) (string, *response) {
		resp := problem(http.StatusBadRequest, probBadKey, detail)
		return "", &resp
	}
	var key string
	for _, name := range []string{"Idempotency-Key", "X-Idempotency-Key"} {
		vs := r.Header.Values(name)
		if len(vs) > 1 {
			return bad(name + " is given more than once")
		}
		if len(vs) == 0 {
			continue
		}
		v, err := sfString(vs[0])
		if err != nil {
			return bad(name + " " + err.Error() + `; send a quoted string, e.g. Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"`)
		}
		if key != "" && v != key {
			return bad("Idempotency-Key and X-Idempotency-Key differ")
		}
		if v == "" {
			return bad(name + " is empty")
		}
		key = v
	}
	if len(key) > maxKeyBytes {
		return bad(fmt.Sprintf("the key is longer than %d bytes", maxKeyBytes))
	}
	return key, nil
}

// sfString parses a header value holding one sf-string, parameters
// allowed and ignored, or a bare value (see idempotencyKey).
func sfString(v string) (string, error) {
	item, err := httpsfv.UnmarshalItem([]string{v})
	if err == nil {
		switch x := item.Value.(type) {
		case string:
			return x, nil
		case httpsfv.Token:
			return string(x), nil
		}
	}
	v = strings.Trim(v, " \t")
	for i := 0; i < len(v); i++ {
		if c := v[i]; c <= ' ' || c > '~' || strings.IndexByte(`",;\`, c) >= 0 {
			return "", errors.New("is not a Structured Field String (RFC 8941 §3.3.3)")
		}
	}
	return v, nil
}
