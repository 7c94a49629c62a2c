package httpidem

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
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

// sfString parses a header value holding one sf-string or sf-token with
// valid parameters, which are ignored (RFC 8941 §4.2.3), or a bare value
// (see Key).
func sfString(v string) (string, error) {
	if s, rest, ok := sfItem(strings.Trim(v, " ")); ok && params(rest) {
		return s, nil
	}
	v = strings.Trim(v, " \t")
	for i := 0; i < len(v); i++ {
		if c := v[i]; c <= ' ' || c > '~' || strings.IndexByte(`",;\`, c) >= 0 {
			return "", errors.New("is not a Structured Field String (RFC 8941 §3.3.3)")
		}
	}
	return v, nil
}

// sfItem reads an sf-string (§4.2.5) or an sf-token (§4.2.6) at the start
// of v, and returns it and what follows.
func sfItem(v string) (item, rest string, ok bool) {
	if v == "" {
		return "", "", false
	}
	if v[0] != '"' {
		if c := v[0]; c != '*' && !('a' <= c|0x20 && c|0x20 <= 'z') {
			return "", "", false
		}
		n := 1
		for n < len(v) && (tchar(v[n]) || v[n] == ':' || v[n] == '/') {
			n++
		}
		return v[:n], v[n:], true
	}
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		switch c := v[i]; {
		case c == '\\':
			if i+1 == len(v) || (v[i+1] != '"' && v[i+1] != '\\') {
				return "", "", false
			}
			i++
			b.WriteByte(v[i])
		case c == '"':
			return b.String(), v[i+1:], true
		case c < ' ' || c > '~':
			return "", "", false
		default:
			b.WriteByte(c)
		}
	}
	return "", "", false // unterminated
}

// params reports whether v is a valid list of parameters (§4.2.3.2):
// ;key or ;key=bare-item, each, with spaces after the semicolons.
func params(v string) bool {
	for v != "" {
		if v[0] != ';' {
			return false
		}
		v = strings.TrimLeft(v[1:], " ")
		n := 0
		for n < len(v) && ('a' <= v[n] && v[n] <= 'z' || v[n] == '*' || n > 0 && ('0' <= v[n] && v[n] <= '9' || strings.IndexByte("_-.", v[n]) >= 0)) {
			n++
		}
		if n == 0 {
			return false
		}
		if v = v[n:]; v == "" || v[0] != '=' {
			continue // a key alone is true
		}
		var ok bool
		if v, ok = bareItem(v[1:]); !ok {
			return false
		}
	}
	return true
}

// bareItem skips a parameter's value: an integer or decimal, a string, a
// token, a byte sequence or a boolean.
func bareItem(v string) (rest string, ok bool) {
	switch {
	case v == "":
		return "", false
	case v[0] == '-' || '0' <= v[0] && v[0] <= '9':
		// At most 15 digits, or 12 before a point and 1 to 3 after it.
		n, whole, frac, dot := 0, 0, 0, false
		if v[0] == '-' {
			n++
		}
		for ; n < len(v) && ('0' <= v[n] && v[n] <= '9' || v[n] == '.' && !dot); n++ {
			switch {
			case v[n] == '.':
				dot = true
			case dot:
				frac++
			default:
				whole++
			}
		}
		if dot {
			return v[n:], whole > 0 && whole <= 12 && frac > 0 && frac <= 3
		}
		return v[n:], whole > 0 && whole <= 15
	case v[0] == ':':
		end := strings.IndexByte(v[1:], ':')
		if end < 0 {
			return "", false
		}
		_, err := base64.StdEncoding.DecodeString(v[1 : 1+end])
		return v[end+2:], err == nil
	case v[0] == '?':
		return v[min(2, len(v)):], len(v) >= 2 && (v[1] == '0' || v[1] == '1')
	}
	_, rest, ok = sfItem(v)
	return rest, ok
}

// tchar is RFC 9110's token character.
func tchar(c byte) bool {
	return 'a' <= c|0x20 && c|0x20 <= 'z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
