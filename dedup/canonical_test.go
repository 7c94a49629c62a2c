package dedup_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/onceq/onceq/dedup"
)

func TestCanonical(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in string
		volatile []string
		want     string
	}{
		{"sorted keys", `{"b":1,"a":2}`, nil, `{"a":2,"b":1}`},
		{"whitespace", " {\n\t\"a\" : [ 1 , 2 ] }\n", nil, `{"a":[1,2]}`},
		{"nested sort", `{"z":{"y":1,"x":2}}`, nil, `{"z":{"x":2,"y":1}}`},
		{"integral float", `{"n":1.0}`, nil, `{"n":1}`},
		{"exponent", `{"n":1e2}`, nil, `{"n":100}`},
		{"negative zero", `{"n":-0,"m":-0.0}`, nil, `{"m":0,"n":0}`},
		{"fraction", `{"n":0.10}`, nil, `{"n":0.1}`},
		{"big integer exact", `{"n":123456789012345678901234567890}`, nil, `{"n":123456789012345678901234567890}`},
		{"no html escaping", `{"s":"<a&b>"}`, nil, `{"s":"<a&b>"}`},
		{"unicode escapes", `{"s":"\u00e9"}`, nil, `{"s":"é"}`},
		{"volatile top", `{"to":"a","attempt":3}`, []string{"attempt"}, `{"to":"a"}`},
		{"volatile nested", `{"meta":{"trace_id":"x","k":1}}`, []string{"meta.trace_id"}, `{"meta":{"k":1}}`},
		{"volatile absent", `{"a":1}`, []string{"b.c"}, `{"a":1}`},
		{"scalar", `"x"`, nil, `"x"`},
		{"null and bools", `[null,true,false]`, nil, `[null,true,false]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := dedup.Canonical([]byte(tt.in), tt.volatile...)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Fatalf("Canonical(%s) = %s, want %s", tt.in, got, tt.want)
			}
		})
	}
}

func TestCanonicalRejects(t *testing.T) {
	t.Parallel()
	for name, in := range map[string]string{
		"empty":         ``,
		"truncated":     `{"a":`,
		"trailing data": `{"a":1} {"b":2}`,
		"duplicate key": `{"a":1,"a":2}`,
		"invalid utf8":  "{\"a\":\"\xff\"}",
		"too deep":      strings.Repeat("[", dedup.MaxDepth+2) + strings.Repeat("]", dedup.MaxDepth+2),
		"bare word":     `nope`,
		"huge exponent": `{"n":1e999}`,
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := dedup.Canonical([]byte(in)); !errors.Is(err, dedup.ErrBadPayload) {
				t.Fatalf("Canonical(%q) error %v, want ErrBadPayload", in, err)
			}
		})
	}
}

// Property: reordering keys and changing whitespace never changes the hash;
// changing any non-volatile leaf always does; changing a volatile one never does.
func TestHashProperties(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 300 {
		doc := randomObject(rng, 0)
		doc["attempt"] = rng.IntN(10)
		base := mustHash(t, render(rng, doc), "attempt")
		if got := mustHash(t, render(rng, doc), "attempt"); got != base {
			t.Fatalf("case %d: reordered document hashed differently", i)
		}
		doc["attempt"] = 99
		if got := mustHash(t, render(rng, doc), "attempt"); got != base {
			t.Fatalf("case %d: volatile field changed the hash", i)
		}
		for _, path := range leafPaths(doc, nil) {
			if path[0] == "attempt" {
				continue
			}
			mutated := deepCopy(doc).(map[string]any)
			mutate(mutated, path)
			if got := mustHash(t, render(rng, mutated), "attempt"); got == base {
				t.Fatalf("case %d: changing %v did not change the hash", i, path)
			}
		}
	}
}

func FuzzCanonical(f *testing.F) {
	for _, s := range []string{`{"b":1,"a":[1,2.5,"x"]}`, `{"n":1e2}`, `[]`, `"s"`, `{"a":{"b":null}}`, `{"a":1,"a":2}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		c, err := dedup.Canonical(in)
		if err != nil {
			return
		}
		// Canonical form is a fixed point and valid JSON.
		c2, err := dedup.Canonical(c)
		if err != nil || !bytes.Equal(c, c2) {
			t.Fatalf("not a fixed point: %s -> %s (%v)", c, c2, err)
		}
		if !json.Valid(c) {
			t.Fatalf("canonical form is not JSON: %s", c)
		}
	})
}

func mustHash(t *testing.T, doc []byte, volatile ...string) string {
	t.Helper()
	h, err := dedup.Hash(doc, volatile...)
	if err != nil {
		t.Fatalf("hash %s: %v", doc, err)
	}
	return h
}

func randomObject(rng *rand.Rand, depth int) map[string]any {
	m := map[string]any{}
	for i := range 1 + rng.IntN(4) {
		m[fmt.Sprintf("k%d_%d", depth, i)] = randomValue(rng, depth+1)
	}
	return m
}

func randomValue(rng *rand.Rand, depth int) any {
	switch n := rng.IntN(6); {
	case n == 0 && depth < 3:
		return randomObject(rng, depth)
	case n == 1 && depth < 3:
		return []any{randomValue(rng, depth+1), randomValue(rng, depth+1)}
	case n == 2:
		return rng.IntN(1000)
	case n == 3:
		return rng.IntN(2) == 0
	default:
		return fmt.Sprintf("s%d", rng.IntN(1000))
	}
}

// render writes v as JSON with keys in random order and random whitespace.
func render(rng *rand.Rand, v any) []byte {
	var b bytes.Buffer
	ws := func() { b.WriteString([]string{"", " ", "\n", "\t "}[rng.IntN(4)]) }
	var walk func(v any)
	walk = func(v any) {
		ws()
		switch t := v.(type) {
		case map[string]any:
			keys := make([]string, 0, len(t))
			for k := range t {
				keys = append(keys, k)
			}
			rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
			b.WriteByte('{')
			for i, k := range keys {
				if i > 0 {
					b.WriteByte(',')
				}
				ws()
				fmt.Fprintf(&b, "%q", k)
				ws()
				b.WriteByte(':')
				walk(t[k])
			}
			b.WriteByte('}')
		case []any:
			b.WriteByte('[')
			for i, e := range t {
				if i > 0 {
					b.WriteByte(',')
				}
				walk(e)
			}
			b.WriteByte(']')
		default:
			j, _ := json.Marshal(t)
			b.Write(j)
		}
		ws()
	}
	walk(v)
	return b.Bytes()
}

func leafPaths(v any, prefix []any) [][]any {
	var out [][]any
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			out = append(out, leafPaths(e, append(slices.Clone(prefix), k))...)
		}
	case []any:
		for i, e := range t {
			out = append(out, leafPaths(e, append(slices.Clone(prefix), i))...)
		}
	default:
		out = append(out, prefix)
	}
	return out
}

func mutate(v any, path []any) {
	set := func(old any) any {
		switch o := old.(type) {
		case int:
			return o + 1
		case bool:
			return !o
		default:
			return fmt.Sprint(o) + "!"
		}
	}
	switch p := path[0].(type) {
	case string:
		m := v.(map[string]any)
		if len(path) == 1 {
			m[p] = set(m[p])
			return
		}
		mutate(m[p], path[1:])
	case int:
		a := v.([]any)
		if len(path) == 1 {
			a[p] = set(a[p])
			return
		}
		mutate(a[p], path[1:])
	}
}

func deepCopy(v any) any {
	switch t := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(t))
		for k, e := range t {
			m[k] = deepCopy(e)
		}
		return m
	case []any:
		a := make([]any, len(t))
		for i, e := range t {
			a[i] = deepCopy(e)
		}
		return a
	}
	return v
}
