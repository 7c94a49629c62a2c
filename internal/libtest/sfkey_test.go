package libtest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/onceq/onceq/dedup/httpidem"
)

// httpidem reads the Idempotency-Key's Structured Field with a parser of
// its own (the library requires asynq and go-redis only); it answers as
// httpsfv, a full RFC 9651 parser, does on a table and on 300,000 values
// built from the characters that matter to the grammar: the same key, or
// an error naming the same item type, or an error.
func TestKeyParserMatchesHTTPSFV(t *testing.T) {
	t.Parallel()
	table := []string{`42`, `-1.5`, `?1`, `?0`, `:Zm9v:`, `@1700000000`, `@-1`, `%"f%c3%bc"`, `%"%c3"`, `%"a\"`,
		`%"x%C3"`, `"abc"`, `abc`, `550e8400-e29b-41d4-a716-446655440000`, `123456789012345`, `1234567890123456`,
		`123456789012.123`, `123456789012.1234`, `1234567890123.1`, `1.`, `-`, `?`, `@`, `@1.5`, `%`, `%"`, `:Zm9v`,
		`:Zm9=:`, "\t42\t", `42;a=?1`, `42;a=@1`, `42;a=%"x"`, `"k";a=%"x%zz"`, `"k";a=@x`}
	for _, v := range table {
		checkKey(t, v)
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	const alphabet = `"\;=:?*-.01aAzZ/ _,!@%fc3` + "\t\xc3\xbc"
	seeds := []string{`"k"`, `"k";a=1`, `tok`, `"a\"b"`, `"k";x=:AQ==:`, `"k";x=:AQ=:`, `"k";x=:AQ:`, `"k";x=:QUJD:`, `"k";y=?1;z="s"`, `"k";v=-1.5`, `"k";n=123456789012345`, `"k";n=1234567890123456`, `"k";d=123456789012.5`, `"k";d=1234567890123.5`,
		`42`, `-1.5`, `?1`, `:Zm9v:`, `@17`, `%"`, `%"x"`, `"k";d=@`, `"k";s=%"`}
	for i := range 300000 {
		var b strings.Builder
		if i%2 == 0 {
			b.WriteString(seeds[rnd.IntN(len(seeds))])
		}
		for range rnd.IntN(10) {
			b.WriteByte(alphabet[rnd.IntN(len(alphabet))])
		}
		checkKey(t, b.String())
	}
}

func checkKey(t *testing.T, v string) {
	t.Helper()
	r := httptest.NewRequest("POST", "/", nil)
	r.Header.Set("Idempotency-Key", v)
	got, err := httpidem.Key(r)
	want, werr := referenceKey(v)
	if (err == nil) != (werr == nil) || got != want || err != nil && !strings.Contains(err.Error(), werr.Error()) {
		t.Fatalf("%q: httpidem %q %v, httpsfv %q %v", v, got, err, want, werr)
	}
}

// referenceKey is httpidem.Key's rule on httpsfv: an sf-string or token
// item (parameters ignored) is the key, an item of another type is refused
// with its type's name, else the bare-value leniency.
func referenceKey(v string) (string, error) {
	v = strings.Trim(v, " \t")
	if item, err := httpsfv.UnmarshalItem([]string{v}); err == nil {
		switch x := item.Value.(type) {
		case string:
			return nonEmpty(x)
		case httpsfv.Token:
			return nonEmpty(string(x))
		case int64:
			return "", errors.New("Structured Field Integer,")
		case float64:
			return "", errors.New("Structured Field Decimal,")
		case bool:
			return "", errors.New("Structured Field Boolean,")
		case []byte:
			return "", errors.New("Structured Field Byte Sequence,")
		case time.Time:
			return "", errors.New("Structured Field Date,")
		case httpsfv.DisplayString:
			return "", errors.New("Structured Field Display String,")
		default:
			panic(fmt.Sprintf("httpsfv item of type %T", x))
		}
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c <= ' ' || c > '~' || strings.IndexByte(`",;\`, c) >= 0 {
			return "", errors.New("not a Structured Field String")
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
