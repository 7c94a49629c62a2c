package httpidem

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/dunglas/httpsfv"
)

// MaxKeyBytes bounds an Idempotency-Key.
const MaxKeyBytes = 255

// Key reads Idempotency-Key or X-Idempotency-Key: "" without either. The
// draft (§2.1) makes the value a Structured Field String (RFC 8941
// §3.3.3): quoted, with \" and \\ escaped, printable ASCII only;
// parameters after it are ignored. As a documented leniency a bare value
// of printable ASCII without space, quote, comma, semicolon or backslash
// (a UUID as most clients send it) is taken as it is. The error says what
// is wrong, for a 400.
func Key(r *http.Request) (string, error) {
	var key string
	for _, name := range []string{"Idempotency-Key", "X-Idempotency-Key"} {
		vs := r.Header.Values(name)
		if len(vs) > 1 {
			return "", errors.New(name + " is given more than once")
		}
		if len(vs) == 0 {
			continue
		}
		v, err := sfString(vs[0])
		if err != nil {
			return "", errors.New(name + " " + err.Error() + `; send a quoted string, e.g. Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"`)
		}
		if key != "" && v != key {
			return "", errors.New("Idempotency-Key and X-Idempotency-Key differ")
		}
		if v == "" {
			return "", errors.New(name + " is empty")
		}
		key = v
	}
	if len(key) > MaxKeyBytes {
		return "", fmt.Errorf("the key is longer than %d bytes", MaxKeyBytes)
	}
	return key, nil
}

// sfString parses a header value holding one sf-string, parameters
// allowed and ignored, or a bare value (see Key).
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
