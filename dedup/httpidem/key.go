package httpidem

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxKeyBytes bounds an Idempotency-Key.
const MaxKeyBytes = 255

// exampleKey is what an error shows when the value sent is too long to quote back.
const exampleKey = `"8e03978e-40d5-43e8-bc93-6894a57f9324"`

// Key reads Idempotency-Key or X-Idempotency-Key: "" without either. The
// draft (§2.1) makes the value a Structured Field String (RFC 8941
// §3.3.3): quoted, with \" and \\ escaped, printable ASCII only;
// parameters after it are ignored. As a documented leniency a bare value
// of printable ASCII without space, quote, comma, semicolon or backslash
// (a UUID as most clients send it) is taken as it is, unless it is a
// Structured Field item of another type (42, -1.5, ?1, :Zm9v:, @1700000000,
// %"x"): a client that sends one means something else than a key. The error
// says what is wrong, for a 400.
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
		v, err := keyValue(name, vs[0])
		if err != nil {
			return "", err
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

// keyValue parses header name's value v: one sf-string or sf-token with
// valid parameters, which are ignored (RFC 8941 §4.2.3), or a bare value
// (see Key).
func keyValue(name, v string) (string, error) {
	v = strings.Trim(v, " \t")
	if typ, s, rest, ok := bareItem(v); ok && params(rest) {
		if typ == sfString || typ == sfToken {
			return s, nil
		}
		ex := exampleKey
		if item := v[:len(v)-len(rest)]; len(item) <= 64 {
			ex = strconv.Quote(item) // an item other than a string is printable ASCII: \" is its only escape
		}
		return "", fmt.Errorf("%s is a Structured Field %s, not a String: send the key quoted, e.g. %s: %s", name, typ, name, ex)
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c <= ' ' || c > '~' || strings.IndexByte(`",;\`, c) >= 0 {
			return "", errors.New(name + " is not a Structured Field String (RFC 8941 §3.3.3); send a quoted string, e.g. " + name + ": " + exampleKey)
		}
	}
	return v, nil
}

// The Structured Field item types (RFC 9651 §3.3), as errors name them.
const (
	sfString        = "String"
	sfToken         = "Token"
	sfInteger       = "Integer"
	sfDecimal       = "Decimal"
	sfBoolean       = "Boolean"
	sfByteSequence  = "Byte Sequence"
	sfDate          = "Date"
	sfDisplayString = "Display String"
)

// bareItem reads a Structured Field bare item (RFC 9651 §4.2.3.1) at the
// start of v and returns its type, its value when a String or Token, and
// what follows.
func bareItem(v string) (typ, s, rest string, ok bool) {
	if v == "" {
		return "", "", "", false
	}
	switch c := v[0]; {
	case c == '"':
		s, rest, ok = quoted(v[1:], false)
		return sfString, s, rest, ok
	case c == '*' || 'a' <= c|0x20 && c|0x20 <= 'z':
		n := 1
		for n < len(v) && (tchar(v[n]) || v[n] == ':' || v[n] == '/') {
			n++
		}
		return sfToken, v[:n], v[n:], true
	case c == '-' || '0' <= c && c <= '9':
		typ, rest, ok = number(v)
		return typ, "", rest, ok
	case c == '?':
		return sfBoolean, "", v[min(2, len(v)):], len(v) >= 2 && (v[1] == '0' || v[1] == '1')
	case c == ':':
		n := 1
		for n < len(v) && ('a' <= v[n]|0x20 && v[n]|0x20 <= 'z' || '0' <= v[n] && v[n] <= '9' || strings.IndexByte("+/=", v[n]) >= 0) {
			n++
		}
		if n == len(v) || v[n] != ':' {
			return "", "", "", false
		}
		_, err := base64.StdEncoding.DecodeString(v[1:n])
		return sfByteSequence, "", v[n+1:], err == nil
	case c == '@':
		typ, rest, ok = number(v[1:])
		return sfDate, "", rest, ok && typ == sfInteger
	case c == '%':
		if len(v) < 2 || v[1] != '"' {
			return "", "", "", false
		}
		_, rest, ok = quoted(v[2:], true)
		return sfDisplayString, "", rest, ok
	}
	return "", "", "", false
}

// quoted reads the rest of a String (§4.2.5) or, display, of a Display
// String (§4.2.10) after its opening quote.
func quoted(v string, display bool) (s, rest string, ok bool) {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c == '\\' && !display:
			if i+1 == len(v) || (v[i+1] != '"' && v[i+1] != '\\') {
				return "", "", false
			}
			i++
			b.WriteByte(v[i])
		case c == '%' && display:
			hi, ok1 := lowerHex(v, i+1)
			lo, ok2 := lowerHex(v, i+2)
			if !ok1 || !ok2 {
				return "", "", false
			}
			i += 2
			b.WriteByte(hi<<4 | lo)
		case c == '"':
			if display && !utf8.ValidString(b.String()) {
				return "", "", false
			}
			return b.String(), v[i+1:], true
		case c < ' ' || c > '~':
			return "", "", false
		default:
			b.WriteByte(c)
		}
	}
	return "", "", false // unterminated
}

func lowerHex(v string, i int) (byte, bool) {
	switch {
	case i >= len(v):
		return 0, false
	case '0' <= v[i] && v[i] <= '9':
		return v[i] - '0', true
	case 'a' <= v[i] && v[i] <= 'f':
		return v[i] - 'a' + 10, true
	}
	return 0, false
}

// number reads an Integer (at most 15 digits) or a Decimal (at most 12
// digits before the point, 1 to 3 after it), §4.2.4.
func number(v string) (typ, rest string, ok bool) {
	n, whole, frac, dot := 0, 0, 0, false
	if v != "" && v[0] == '-' {
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
		return sfDecimal, v[n:], whole > 0 && whole <= 12 && frac > 0 && frac <= 3
	}
	return sfInteger, v[n:], whole > 0 && whole <= 15
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
		if _, _, v, ok = bareItem(v[1:]); !ok {
			return false
		}
	}
	return true
}

// tchar is RFC 9110's token character.
func tchar(c byte) bool {
	return 'a' <= c|0x20 && c|0x20 <= 'z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
