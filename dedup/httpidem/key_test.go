package httpidem_test

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/onceq/onceq/dedup/httpidem"
)

// The key is an sf-string or sf-token, parameters allowed and ignored
// when they are valid (RFC 8941), or a bare value of printable ASCII
// without space, quote, comma, semicolon or backslash that is not an item
// of another type.
func TestKeyParsing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ header, key string }{
		{`"8e03978e-40d5-43e8-bc93-6894a57f9324"`, "8e03978e-40d5-43e8-bc93-6894a57f9324"},
		{`"a \"quoted\" \\ key"`, `a "quoted" \ key`},
		{`  "padded"  `, "padded"},
		{`"k";ttl=10;x;y=?1;z="s";w=:AQ==:;v=-1.5;u=tok/en`, "k"},
		{`"k"; spaced=1`, "k"},
		{`token:with/colon`, "token:with/colon"},
		{`*star`, "*star"},
		{`8e03978e-40d5`, "8e03978e-40d5"}, // bare: what most clients send
		{`550e8400-e29b-41d4-a716-446655440000`, "550e8400-e29b-41d4-a716-446655440000"},
		{`abc`, "abc"},
		{`"abc"`, "abc"},
		{"\t\"tabbed\"", "tabbed"},
		{`42abc`, "42abc"},   // not an Integer: bare
		{`1.2345`, "1.2345"}, // a Decimal has at most 3 digits after the point
		{`?2`, "?2"},         // not a Boolean
		{`:Zm9v`, ":Zm9v"},   // an unterminated Byte Sequence
		{`@1.5`, "@1.5"},     // a Date is an integer
		{`%zz`, "%zz"},       // not a Display String
		{`42`, ""},
		{`-1.5`, ""},
		{`?1`, ""},
		{`:Zm9v:`, ""},
		{`"a", "b"`, ""},
		{`"unterminated`, ""},
		{`"bad \escape"`, ""},
		{"\"tab\tinside\"", ""},
		{`"k";Bad=1`, ""},
		{`"k";x=`, ""},
		{`"k";x=1.`, ""},
		{`"k";x=?2`, ""},
		{`"k";x=:not base64!:`, ""},
		{`"k" trailing`, ""},
		{`has space`, ""},
		{`semi;colon`, "semi"}, // a token with a valueless parameter
		{`back\slash`, ""},
	} {
		r := httptest.NewRequest("POST", "/", nil)
		r.Header.Set("Idempotency-Key", tc.header)
		got, err := httpidem.Key(r)
		if tc.key == "" && err == nil {
			t.Errorf("%q: key %q, want an error", tc.header, got)
		}
		if tc.key != "" && (err != nil || got != tc.key) {
			t.Errorf("%q: key %q %v, want %q", tc.header, got, err, tc.key)
		}
	}
}

// A value that is a Structured Field item of another type than String is
// refused with the type it is and how to send it quoted; the leniency for
// bare keys does not take it for one.
func TestKeyOfAnotherType(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ header, typ, quoted string }{
		{`42`, "Integer", `"42"`},
		{`-1.5`, "Decimal", `"-1.5"`},
		{`?1`, "Boolean", `"?1"`},
		{`:Zm9v:`, "Byte Sequence", `":Zm9v:"`},
		{`@1700000000`, "Date", `"@1700000000"`},
		{`%"f%c3%bc"`, "Display String", `"%\"f%c3%bc\""`},
		{`42;a=1`, "Integer", `"42"`},
		{`  7  `, "Integer", `"7"`},
		{":" + strings.Repeat("AAAA", 20) + ":", "Byte Sequence", `"8e03978e-40d5-43e8-bc93-6894a57f9324"`},
	} {
		r := httptest.NewRequest("POST", "/", nil)
		r.Header.Set("X-Idempotency-Key", tc.header)
		got, err := httpidem.Key(r)
		want := "X-Idempotency-Key is a Structured Field " + tc.typ + ", not a String: send the key quoted, e.g. X-Idempotency-Key: " + tc.quoted
		if err == nil || err.Error() != want {
			t.Errorf("%q: key %q, error %v, want %q", tc.header, got, err, want)
		}
	}
}
