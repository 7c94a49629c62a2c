package httpidem_test

import (
	"net/http/httptest"
	"testing"

	"github.com/onceq/onceq/dedup/httpidem"
)

// The key is an sf-string or sf-token, parameters allowed and ignored
// when they are valid (RFC 8941), or a bare value of printable ASCII
// without space, quote, comma, semicolon or backslash.
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
		{`42`, "42"},
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
