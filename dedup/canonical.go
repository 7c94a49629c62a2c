package dedup

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// maxDepth bounds the nesting of a payload; deeper documents are rejected
// rather than recursed into.
const maxDepth = 64

// errBadPayload is returned for a payload that is not a single valid JSON document.
var errBadPayload = errors.New("onceq: bad payload")

// Canonical JSON is what onceq hashes:
//   - object keys sorted bytewise, no insignificant whitespace, no HTML escaping;
//   - volatile fields left out: each is a dotted path from the root
//     ("attempt", "meta.trace_id"); a path does not descend into arrays;
//   - numbers by value: an integer literal keeps its exact digits ("-0" is "0");
//     any other number is parsed as float64 and written as an integer when it
//     is integral and below 2^53, else in Go's shortest round-trip 'g' form.
//     So 1, 1.0 and 1e0 hash alike; integers beyond 2^53 written with a
//     fraction or exponent may not match their plain-digit spelling;
//   - strings re-escaped as encoding/json does; no Unicode normalisation.
//
// Duplicate object keys, invalid UTF-8, trailing data and nesting deeper than
// maxDepth are errors wrapping errBadPayload. The fingerprint is the SHA-256
// of the canonical JSON as unpadded base64url (43 characters).

// canon canonicalises one document straight from its bytes: no tree of
// values, object members sorted in place as offsets into the input. Its
// buffers are pooled, so a small payload costs no allocation here.
type canon struct {
	in   []byte
	out  []byte
	mems []member // members of the objects being written, a stack
	keys []byte   // object keys that carried escapes, decoded
	vol  []string
	offs []int // per object level: how far each volatile path has matched, -1 when it cannot
	// quiet > 0 while walking a dropped (volatile) value: checked for depth
	// and duplicate keys like any other, but not written, numbers not parsed.
	quiet int
	// Offsets in `in` of the values of the root object's "id" and
	// "dedup_key" members (case-insensitive, as encoding/json matches
	// struct fields), -1 when absent.
	id, dedupKey int
	sum          [sha256.Size]byte
}

type member struct {
	key, klen int  // the key's bytes: in[key:key+klen], or keys[...] when esc
	esc       bool // the key had escapes
	val       int  // offset of the value in `in`
}

var canonPool = sync.Pool{New: func() any { return new(canon) }}

func getCanon() *canon { return canonPool.Get().(*canon) }

func putCanon(c *canon) {
	if cap(c.out) > 64<<10 || cap(c.keys) > 64<<10 || cap(c.mems) > 4096 {
		return // do not pin a huge document's buffers
	}
	c.in, c.vol = nil, nil
	canonPool.Put(c)
}

// run canonicalises data. marshalled says data is encoding/json's output,
// valid JSON by construction (it checks what a MarshalJSON returns), so the
// walk runs without the syntax check first; should it fail, the checked
// path runs and says what is wrong, in the same words as for any payload.
func (c *canon) run(data []byte, volatile []string, marshalled bool) error {
	if marshalled && utf8.Valid(data) && c.walk(data, volatile) == nil {
		return nil
	}
	if !utf8.Valid(data) {
		return fmt.Errorf("%w: invalid UTF-8", errBadPayload)
	}
	if !valid(data) {
		var v any // only to say what is wrong
		err := json.Unmarshal(data, &v)
		if err == nil {
			err = errors.New("not a single JSON document")
		}
		return fmt.Errorf("%w: %v", errBadPayload, err)
	}
	if err := c.walk(data, volatile); err != nil {
		return fmt.Errorf("%w: %v", errBadPayload, err)
	}
	return nil
}

// walk writes the canonical form of data, valid JSON, to c.out.
func (c *canon) walk(data []byte, volatile []string) error {
	c.in, c.vol = data, volatile
	c.out, c.mems, c.keys, c.offs = c.out[:0], c.mems[:0], c.keys[:0], c.offs[:0]
	c.quiet, c.id, c.dedupKey = 0, -1, -1
	lvl := -1
	if len(volatile) > 0 {
		lvl = 0
		for range volatile {
			c.offs = append(c.offs, 0)
		}
	}
	return c.value(skipWS(data, 0), 0, lvl)
}

func (c *canon) fingerprint() string {
	c.sum = sha256.Sum256(c.out)
	var b [43]byte // base64.RawURLEncoding.EncodedLen(sha256.Size)
	base64.RawURLEncoding.Encode(b[:], c.sum[:])
	return string(b[:])
}

// value writes the value at in[i]. The document is valid JSON (checked by
// run), so the walk only decides, never validates syntax. lvl indexes offs
// for an object reached through objects only; -1 when no volatile path can
// match below.
func (c *canon) value(i, depth, lvl int) error {
	if depth > maxDepth {
		return fmt.Errorf("nested deeper than %d", maxDepth)
	}
	switch c.in[i] {
	case '{':
		return c.object(i, depth, lvl)
	case '[':
		c.out = append(c.out, '[')
		i = skipWS(c.in, i+1)
		for n := 0; c.in[i] != ']'; n++ {
			if n > 0 {
				c.out = append(c.out, ',')
			}
			if err := c.value(i, depth+1, -1); err != nil {
				return err
			}
			i = skipWS(c.in, skipValue(c.in, i))
			if c.in[i] == ',' {
				i = skipWS(c.in, i+1)
			}
		}
		c.out = append(c.out, ']')
	case '"':
		end := skipString(c.in, i)
		s, err := c.unquote(c.in[i:end])
		if err != nil {
			return err
		}
		c.out = appendString(c.out, s)
	case 't':
		c.out = append(c.out, "true"...)
	case 'f':
		c.out = append(c.out, "false"...)
	case 'n':
		c.out = append(c.out, "null"...)
	default:
		num := c.in[i:skipNumber(c.in, i)]
		if c.quiet > 0 {
			return nil
		}
		var err error
		c.out, err = appendNumber(c.out, num)
		return err
	}
	return nil
}

func (c *canon) object(i, depth, lvl int) error {
	base := len(c.mems)
	defer func() { c.mems = c.mems[:base] }()
	i = skipWS(c.in, i+1)
	for c.in[i] != '}' {
		end := skipString(c.in, i)
		m := member{key: i + 1, klen: end - i - 2}
		if bytes.IndexByte(c.in[i:end], '\\') >= 0 {
			s, err := c.unquote(c.in[i:end])
			if err != nil {
				return err
			}
			m = member{key: len(c.keys), klen: len(s), esc: true}
			c.keys = append(c.keys, s...)
		}
		i = skipWS(c.in, end) // ':'
		i = skipWS(c.in, i+1) // the value
		m.val = i
		if depth == 0 {
			k := c.key(m)
			switch {
			case bytes.EqualFold(k, []byte("id")):
				c.id = i
			case bytes.EqualFold(k, []byte("dedup_key")):
				c.dedupKey = i
			}
		}
		c.mems = append(c.mems, m)
		i = skipWS(c.in, skipValue(c.in, i))
		if c.in[i] == ',' {
			i = skipWS(c.in, i+1)
		}
	}
	top := len(c.mems)
	ms := c.mems[base:top]
	slices.SortFunc(ms, func(a, b member) int { return bytes.Compare(c.key(a), c.key(b)) })
	for j := 1; j < len(ms); j++ {
		if bytes.Equal(c.key(ms[j-1]), c.key(ms[j])) {
			return fmt.Errorf("duplicate key %q", c.key(ms[j]))
		}
	}

	c.out = append(c.out, '{')
	first := true
	for j := base; j < top; j++ {
		m := c.mems[j]
		k := c.key(m)
		drop, child := c.match(lvl, k)
		mark := len(c.out)
		if drop {
			c.quiet++
		} else {
			if !first {
				c.out = append(c.out, ',')
			}
			first = false
			c.out = append(appendString(c.out, k), ':')
		}
		err := c.value(m.val, depth+1, child)
		if child >= 0 {
			c.offs = c.offs[:child]
		}
		if drop {
			c.quiet--
			c.out = c.out[:mark]
		}
		if err != nil {
			return err
		}
	}
	c.out = append(c.out, '}')
	return nil
}

// match says whether the member k of the object whose volatile state is at
// lvl is dropped, and pushes the state of its value (-1: nothing can match).
func (c *canon) match(lvl int, k []byte) (drop bool, child int) {
	// A path's segments never hold a '.', so neither can a key it names.
	if lvl < 0 || bytes.IndexByte(k, '.') >= 0 {
		return false, -1
	}
	child = len(c.offs)
	live := false
	for j, p := range c.vol {
		o, next := c.offs[lvl+j], -1
		if o >= 0 {
			rest := p[o:]
			if rest == string(k) {
				drop = true
			} else if len(rest) > len(k) && rest[len(k)] == '.' && rest[:len(k)] == string(k) {
				next, live = o+len(k)+1, true
			}
		}
		c.offs = append(c.offs, next)
	}
	if !live {
		c.offs = c.offs[:child]
		return drop, -1
	}
	return drop, child
}

func (c *canon) key(m member) []byte {
	if m.esc {
		return c.keys[m.key : m.key+m.klen]
	}
	return c.in[m.key : m.key+m.klen]
}

// unquote returns the content of a string literal; only one with escapes is
// decoded, by encoding/json itself, so escapes mean what they always did.
func (c *canon) unquote(lit []byte) ([]byte, error) {
	body := lit[1 : len(lit)-1]
	if bytes.IndexByte(body, '\\') < 0 {
		return body, nil
	}
	var s string
	if err := json.Unmarshal(lit, &s); err != nil {
		return nil, err
	}
	return []byte(s), nil
}

// idValue is the payload's own business key, as derive reads it: the root
// object's "dedup_key", else its "id", each a non-empty string or an
// integer in int64 range.
func (c *canon) idValue() string {
	for _, at := range [2]int{c.dedupKey, c.id} {
		if at < 0 {
			continue
		}
		switch b := c.in[at]; {
		case b == '"':
			if s, err := c.unquote(c.in[at:skipString(c.in, at)]); err == nil && len(s) > 0 {
				return string(s)
			}
		case b == '-' || '0' <= b && b <= '9':
			num := string(c.in[at:skipNumber(c.in, at)])
			if _, err := strconv.ParseInt(num, 10, 64); err == nil {
				return num
			}
		}
	}
	return ""
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the offset just past the string literal at b[i].
func skipString(b []byte, i int) int {
	for i++; b[i] != '"'; i++ {
		if b[i] == '\\' {
			i++
		}
	}
	return i + 1
}

func skipNumber(b []byte, i int) int {
	for i < len(b) && strings.IndexByte("+-.0123456789eE", b[i]) >= 0 {
		i++
	}
	return i
}

// skipValue returns the offset just past the valid JSON value at b[i].
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case 't', 'n':
		return i + 4
	case 'f':
		return i + 5
	case '{', '[':
		depth := 0
		for ; ; i++ {
			switch b[i] {
			case '"':
				i = skipString(b, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
	}
	return skipNumber(b, i)
}

// appendString writes s as encoding/json does without HTML escaping.
func appendString(dst, s []byte) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRune(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(append(dst, s[start:i]...), `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			dst = append(append(dst, s[start:i]...), '\\', 'u', '2', '0', '2', hex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	return append(append(dst, s[start:]...), '"')
}

// appendNumber writes a number literal by value (see Canonical JSON above canon).
func appendNumber(dst, s []byte) ([]byte, error) {
	if !bytes.ContainsAny(s, ".eE") {
		// Integer literal: exact digits; strip a sign from zero.
		if len(bytes.TrimLeft(s, "-0")) == 0 {
			return append(dst, '0'), nil
		}
		return append(dst, s...), nil
	}
	f, err := strconv.ParseFloat(string(s), 64)
	if err != nil {
		return dst, fmt.Errorf("number %s: %w", s, err)
	}
	if f == 0 {
		return append(dst, '0'), nil
	}
	if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
		return strconv.AppendInt(dst, int64(f), 10), nil
	}
	return strconv.AppendFloat(dst, f, 'g', -1, 64), nil
}

// volatileOf lists the dotted JSON paths of the fields of struct v (or a
// pointer to one) tagged `dedup:"volatile"`, descending into nested structs.
// Pass the result to canon.run; it is shared, do not modify it.
func volatileOf(v any) []string {
	t := reflect.TypeOf(v)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return nil
	}
	if f, ok := volatileCache.Load(t); ok {
		return f.([]string)
	}
	f, _ := volatileCache.LoadOrStore(t, volatileFields(t, "", 0))
	return f.([]string)
}

// volatileCache holds volatileOf per struct type: every constructor
// asks, and a type's tags never change.
var volatileCache sync.Map // reflect.Type -> []string

func volatileFields(t reflect.Type, prefix string, depth int) []string {
	var out []string
	for f := range t.Fields() {
		if !f.IsExported() || depth > maxDepth {
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
