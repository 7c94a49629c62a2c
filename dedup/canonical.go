package dedup

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxDepth bounds the nesting of a payload; deeper documents are rejected
// rather than recursed into.
const MaxDepth = 64

// ErrBadPayload is returned for a payload that is not a single valid JSON document.
var ErrBadPayload = errors.New("dedup: bad payload")

// Canonical returns the canonical JSON of a JSON document, which is what
// onceq hashes:
//   - object keys sorted bytewise, no insignificant whitespace, no HTML escaping;
//   - volatile fields left out: each is a dotted path from the root
//     ("attempt", "meta.trace_id"); a path does not descend into arrays;
//   - numbers by value: an integer literal keeps its exact digits ("-0" is "0");
//     any other number is parsed as float64 and written as an integer when it
//     is integral and below 2^53, else in Go's shortest round-trip 'g' form.
//     So 1, 1.0 and 1e0 hash alike; integers beyond 2^53 written with a
//     fraction or exponent may not match their plain-digit spelling;
//   - strings re-escaped by encoding/json; no Unicode normalisation.
//
// Duplicate object keys, invalid UTF-8, trailing data and nesting deeper than
// MaxDepth are errors wrapping ErrBadPayload.
func Canonical(data []byte, volatile ...string) ([]byte, error) {
	if !utf8.Valid(data) {
		return nil, fmt.Errorf("%w: invalid UTF-8", ErrBadPayload)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeValue(dec, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadPayload, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: trailing data after the document", ErrBadPayload)
	}
	for _, p := range volatile {
		drop(v, strings.Split(p, "."))
	}
	var buf bytes.Buffer
	buf.Grow(len(data))
	if err := encodeValue(&buf, v); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadPayload, err)
	}
	return buf.Bytes(), nil
}

// Hash is the hex SHA-256 of Canonical(data, volatile...).
func Hash(data []byte, volatile ...string) (string, error) {
	c, err := Canonical(data, volatile...)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(c)
	return hex.EncodeToString(sum[:]), nil
}

type object map[string]any

func decodeValue(dec *json.Decoder, depth int) (any, error) {
	if depth > MaxDepth {
		return nil, fmt.Errorf("nested deeper than %d", MaxDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			obj := object{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k := kt.(string)
				if _, dup := obj[k]; dup {
					return nil, fmt.Errorf("duplicate key %q", k)
				}
				if obj[k], err = decodeValue(dec, depth+1); err != nil {
					return nil, err
				}
			}
			_, err := dec.Token() // '}'
			return obj, err
		case '[':
			arr := []any{}
			for dec.More() {
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				arr = append(arr, v)
			}
			_, err := dec.Token() // ']'
			return arr, err
		}
		return nil, fmt.Errorf("unexpected %q", t)
	default:
		return t, nil // string, json.Number, bool, nil
	}
}

func drop(v any, path []string) {
	obj, ok := v.(object)
	if !ok || len(path) == 0 {
		return
	}
	if len(path) == 1 {
		delete(obj, path[0])
		return
	}
	drop(obj[path[0]], path[1:])
}

func encodeValue(buf *bytes.Buffer, v any) error {
	switch t := v.(type) {
	case object:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		buf.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				buf.WriteByte(',')
			}
			writeString(buf, k)
			buf.WriteByte(':')
			if err := encodeValue(buf, t[k]); err != nil {
				return err
			}
		}
		buf.WriteByte('}')
	case []any:
		buf.WriteByte('[')
		for i, e := range t {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := encodeValue(buf, e); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
	case string:
		writeString(buf, t)
	case json.Number:
		n, err := canonicalNumber(string(t))
		if err != nil {
			return err
		}
		buf.WriteString(n)
	case bool:
		buf.WriteString(strconv.FormatBool(t))
	case nil:
		buf.WriteString("null")
	default:
		return fmt.Errorf("unexpected %T", v)
	}
	return nil
}

func writeString(buf *bytes.Buffer, s string) {
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)           // a string always encodes
	buf.Truncate(buf.Len() - 1) // Encode appends '\n'
}

func canonicalNumber(s string) (string, error) {
	if !strings.ContainsAny(s, ".eE") {
		// Integer literal: exact digits; strip a sign from zero.
		if strings.TrimLeft(s, "-0") == "" {
			return "0", nil
		}
		return s, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return "", fmt.Errorf("number %s: %w", s, err)
	}
	if f == 0 {
		return "0", nil
	}
	if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
		return strconv.FormatInt(int64(f), 10), nil
	}
	return strconv.FormatFloat(f, 'g', -1, 64), nil
}

// VolatileFields lists the dotted JSON paths of the fields of struct v (or a
// pointer to one) tagged `dedup:"volatile"`, descending into nested structs.
// Pass the result to Canonical or Hash.
func VolatileFields(v any) []string {
	t := reflect.TypeOf(v)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return nil
	}
	return volatileFields(t, "", 0)
}

func volatileFields(t reflect.Type, prefix string, depth int) []string {
	var out []string
	for f := range t.Fields() {
		if !f.IsExported() || depth > MaxDepth {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if f.Tag.Get("dedup") == "volatile" {
			out = append(out, prefix+name)
			continue
		}
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct {
			out = append(out, volatileFields(ft, prefix+name+".", depth+1)...)
		}
	}
	return out
}
