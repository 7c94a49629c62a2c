package dedup

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// diffVolatile are the volatile sets every differential case runs with:
// none, top-level, nested, through a key with a dot, and odd paths.
var diffVolatile = [][]string{
	nil,
	{"attempt"},
	{"meta.trace_id", "a"},
	{"a.b.c", "x.y", ""},
	{"a.", "..", "id"},
}

// diffSeeds exercise what the fast path decides on its own: escapes in keys
// and strings, U+2028, surrogates, duplicate keys after decoding, numbers at
// the edges, depth, volatile values that would fail to encode, id probes.
var diffSeeds = []string{
	`{"b":1,"a":[1,2.5,"x"]}`, `{"n":1e2}`, `[]`, `"s"`, `{"a":{"b":null}}`, `{"a":1,"a":2}`,
	`{"a":1,"\u0061":2}`, `{"k\"q":"v\\w\/x\b\f\n\r\t"}`, `{"s":"\u2028 \u2029","t":"` + "\u2028" + `"}`,
	`{"s":"\ud800","t":"\ud83d\ude00","u":"\udc00\ud800"}`, `{"é":1,"e":2,"\u00e9x":3}`,
	`{"n":-0,"m":-0.0,"o":0e5,"p":1E400,"q":1e-400,"r":123456789012345678901234567890,"s":9007199254740993.0}`,
	`{"attempt":1e999,"a":1}`, `{"meta":{"trace_id":1e999,"k":[{"trace_id":1}]}}`,
	`{"a":{"b":{"c":1,"d":2}},"x":[{"y":1}]}`, `{"a":{"b":{"c":1,"c":2}}}`,
	`{"id":"pmt-1"}`, `{"ID":7}`, `{"id":"","dedup_key":"d"}`, `{"Id":1.0,"dedup_KEY":"k"}`,
	`{"id":"a","Id":"b"}`, `{"id":null,"dedup_key":false}`, `{"id":"x\u0000y"}`, `{"id":99999999999999999999}`,
	`{"dedup_\u212aey":"kelvin"}`, `{"id":" "}`, `{"id":"\u0041"}`, `[{"id":1}]`,
	` {"a" : [ 1 , { } , [ ] ] } `, `{"a":1} x`, `{"a":1}{}`, `{"a":`, `nul`, "\ufeff{}", `{"a":"\x"}`,
	strings.Repeat("[", maxDepth) + `1` + strings.Repeat("]", maxDepth),
	strings.Repeat("[", maxDepth+1) + `1` + strings.Repeat("]", maxDepth+1),
	`{"attempt":` + strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1) + `}`,
	`{"attempt":{"x":1,"x":2}}`,
	`{"":{".":0}}`, `{"a.b":1,"a":{"b":2}}`, `{"meta.trace_id":1}`,
}

// checkSameAsReference fails unless the fast canonicaliser and derive agree
// with the reference on in: same error-or-not, same bytes, same key id.
func checkSameAsReference(t *testing.T, in []byte) {
	t.Helper()
	for _, vol := range diffVolatile {
		want, werr := refCanonical(in, vol...)
		got, gerr := Canonical(in, vol...)
		if (werr == nil) != (gerr == nil) || !bytes.Equal(got, want) {
			t.Fatalf("Canonical(%q, %q) = %q, %v; reference %q, %v", in, vol, got, gerr, want, werr)
		}
		if gerr != nil && !errors.Is(gerr, errBadPayload) {
			t.Fatalf("Canonical(%q) error %v does not wrap errBadPayload", in, gerr)
		}
		k, fp, err := derive("ns", in, "", vol)
		if json.Valid(in) {
			// What encoding/json wrote skips the syntax check: the same
			// key, fingerprint and error, word for word.
			mk, mfp, merr := deriveMarshalled("ns", in, "", vol)
			if mk != k || mfp != fp || fmt.Sprint(merr) != fmt.Sprint(err) {
				t.Fatalf("deriveMarshalled(%q, %q) = %v, %s, %v; derive %v, %s, %v", in, vol, mk, mfp, merr, k, fp, err)
			}
		}
		if werr != nil {
			if err == nil {
				t.Fatalf("derive(%q) accepted what the reference rejects", in)
			}
			continue
		}
		sum := sha256.Sum256(want)
		// The reference finds the id; the key rule (content ids and
		// caller ids in their own spaces) is the same function for both.
		wantID := "~" + hex.EncodeToString(sum[:])
		var kerr error
		if id := refPayloadID(in); id != "" {
			wantID, kerr = callerID("ns", id)
		}
		if kerr != nil {
			if err == nil {
				t.Fatalf("derive(%q) = %v; the reference id %q is not a valid key", in, k, wantID)
			}
			continue
		}
		if err != nil || k.ID != wantID {
			t.Fatalf("derive(%q, %q) id = %q, %v; reference %q", in, vol, k.ID, err, wantID)
		}
		if fp != base64.RawURLEncoding.EncodeToString(sum[:]) {
			t.Fatalf("derive(%q) fingerprint %s is not the SHA-256 of the canonical form", in, fp)
		}
	}
}

// valid must accept exactly what json.Valid accepts, up to the depth
// Canonical allows.
func checkValid(t *testing.T, in []byte) {
	t.Helper()
	if want := json.Valid(in); valid(in) != want && (!want || !tooDeep(in)) {
		t.Fatalf("valid(%q) = %v, json.Valid %v", in, !want, want)
	}
}

// tooDeep reports brackets nested beyond what valid walks into.
func tooDeep(in []byte) bool {
	depth, deepest := 0, 0
	for _, c := range in {
		switch c {
		case '[', '{':
			depth++
			deepest = max(deepest, depth)
		case ']', '}':
			depth--
		}
	}
	return deepest > maxDepth+1
}

// validSeeds are the corners of JSON's grammar valid decides on its own.
var validSeeds = []string{
	``, ` `, `0`, `-0`, `01`, `-`, `1.`, `.5`, `1e`, `1e+`, `1E-5`, `+1`, `-1.5e10`, `0.0e0`, `1.e5`,
	`tru`, `true`, `truex`, `nul`, `null `, `false`, `[`, `]`, `[]`, `[1,]`, `[,1]`, `[1 2]`, `{}`, `{,}`,
	`{"a"}`, `{"a":}`, `{"a":1,}`, `{"a":1 "b":2}`, `{1:2}`, `"\u12G4"`, `"\u12"`, `"\x"`, `"\/"`,
	"\"\t\"", "\"a\x01\"", `"\"`, `"abc`, "\ufeff1", "1\x00", ` {"a" : [ 1 , {} ] } `, `"` + "\u2028" + `"`,
}

func TestCanonicalMatchesReference(t *testing.T) {
	t.Parallel()
	for _, s := range append(validSeeds, diffSeeds...) {
		checkValid(t, []byte(s))
		checkSameAsReference(t, []byte(s))
	}
}

func FuzzCanonicalMatchesReference(f *testing.F) {
	for _, s := range diffSeeds {
		f.Add([]byte(s))
	}
	for _, s := range validSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		checkValid(t, in)
		checkSameAsReference(t, in)
	})
}

// refDerive is the old derive: hash of the reference canonical form, then a
// second parse for the id.
func refDerive(in []byte, vol ...string) ([]byte, error) {
	c, err := refCanonical(in, vol...)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(c)
	id := refPayloadID(in)
	if id == "" {
		id = hex.EncodeToString(sum[:])
	}
	_, err = NewKey("ns", id)
	return []byte(hex.EncodeToString(sum[:])), err
}

func fastDerive(in []byte, vol ...string) ([]byte, error) {
	_, fp, err := derive("ns", in, "", vol)
	return []byte(fp), err
}

// BenchmarkDeriveVsReference runs the old and the new derive (and both
// canonicalisers) on the same 200-byte payload in one run, so their ratio
// survives a loaded machine.
func BenchmarkDeriveVsReference(b *testing.B) {
	in := []byte(`{"to":"ada.lovelace@example.com","subject":"Your weekly report","body":"Hello Ada, your week 26 report is in.","template":"report-v2","meta":{"tenant":"acm","trace_id":"4bf92f3577b34da6"},"attempt":1}`)
	vol := []string{"attempt", "meta.trace_id"}
	for _, impl := range []struct {
		name string
		fn   func([]byte, ...string) ([]byte, error)
	}{{"derive", fastDerive}, {"derive-reference", refDerive}, {"canonical", Canonical}, {"canonical-reference", refCanonical}} {
		b.Run(impl.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := impl.fn(in, vol...); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
