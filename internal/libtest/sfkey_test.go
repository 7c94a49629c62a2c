package libtest

import (
	"errors"
	"math/rand/v2"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/dunglas/httpsfv"

	"github.com/onceq/onceq/dedup/httpidem"
)

// httpidem reads the Idempotency-Key's Structured Field with a parser of
// its own (the library requires asynq and go-redis only); it answers as
// httpsfv, a full RFC 8941 parser, does on 200,000 values built from the
// characters that matter to the grammar.
func TestKeyParserMatchesHTTPSFV(t *testing.T) {
	t.Parallel()
	rnd := rand.New(rand.NewPCG(1, 2))
	const alphabet = `"\;=:?*-.01aAzZ/ _,!` + "\t"
	seeds := []string{`"k"`, `"k";a=1`, `tok`, `"a\"b"`, `"k";x=:AQ==:`, `"k";x=:AQ=:`, `"k";x=:AQ:`, `"k";x=:QUJD:`, `"k";y=?1;z="s"`, `"k";v=-1.5`, `"k";n=123456789012345`, `"k";n=1234567890123456`, `"k";d=123456789012.5`, `"k";d=1234567890123.5`}
	for i := range 200000 {
		var b strings.Builder
		if i%2 == 0 {
			b.WriteString(seeds[rnd.IntN(len(seeds))])
		}
		for range rnd.IntN(10) {
			b.WriteByte(alphabet[rnd.IntN(len(alphabet))])
		}
		v := b.String()
		r := httptest.NewRequest("POST", "/", nil)
		r.Header.Set("Idempotency-Key", v)
		got, err := httpidem.Key(r)
		want, werr := referenceKey(v)
		if (err == nil) != (werr == nil) || got != want {
			t.Fatalf("%q: httpidem %q %v, httpsfv %q %v", v, got, err, want, werr)
		}
	}
}

// referenceKey is httpidem.Key's rule on httpsfv: an sf-string or token
// item (parameters ignored), else the bare-value leniency.
func referenceKey(v string) (string, error) {
	if item, err := httpsfv.UnmarshalItem([]string{v}); err == nil {
		switch x := item.Value.(type) {
		case string:
			return nonEmpty(x)
		case httpsfv.Token:
			return nonEmpty(string(x))
		}
	}
	v = strings.Trim(v, " \t")
	for i := 0; i < len(v); i++ {
		if c := v[i]; c <= ' ' || c > '~' || strings.IndexByte(`",;\`, c) >= 0 {
			return "", errors.New("not an sf-string")
		}
	}
	return nonEmpty(v)
}

func nonEmpty(s string) (string, error) {
	if s == "" {
		return "", errors.New("empty")
	}
	return s, nil
}
