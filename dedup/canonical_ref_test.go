package dedup

// The canonicaliser as it was before it went allocation-light (a tree of
// decoded values through encoding/json's Decoder), kept as the reference
// the fast one must match byte for byte: FuzzCanonicalMatchesReference.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

func refCanonical(data []byte, volatile ...string) ([]byte, error) {
	if !utf8.Valid(data) {
		return nil, fmt.Errorf("%w: invalid UTF-8", errBadPayload)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := refDecode(dec, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errBadPayload, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: trailing data after the document", errBadPayload)
	}
	for _, p := range volatile {
		refDrop(v, strings.Split(p, "."))
	}
	var buf bytes.Buffer
	if err := refEncode(&buf, v); err != nil {
		return nil, fmt.Errorf("%w: %v", errBadPayload, err)
	}
	return buf.Bytes(), nil
}

// refPayloadID is the old derive's business key probe.
func refPayloadID(payload []byte) string {
	var probe struct {
		DedupKey json.RawMessage `json:"dedup_key"`
		ID       json.RawMessage `json:"id"`
	}
	if json.Unmarshal(payload, &probe) != nil {
		return ""
	}
	for _, raw := range []json.RawMessage{probe.DedupKey, probe.ID} {
		var s string
		if json.Unmarshal(raw, &s) == nil && s != "" {
			return s
		}
		var n json.Number
		if json.Unmarshal(raw, &n) == nil {
			if _, err := n.Int64(); err == nil {
				return n.String()
			}
		}
	}
	return ""
}

type refObject map[string]any

func refDecode(dec *json.Decoder, depth int) (any, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("nested deeper than %d", maxDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			obj := refObject{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k := kt.(string)
				if _, dup := obj[k]; dup {
					return nil, fmt.Errorf("duplicate key %q", k)
				}
				if obj[k], err = refDecode(dec, depth+1); err != nil {
					return nil, err
				}
			}
			_, err := dec.Token()
			return obj, err
		case '[':
			arr := []any{}
			for dec.More() {
				v, err := refDecode(dec, depth+1)
				if err != nil {
					return nil, err
				}
				arr = append(arr, v)
			}
			_, err := dec.Token()
			return arr, err
		}
		return nil, fmt.Errorf("unexpected %q", t)
	default:
		return t, nil
	}
}

func refDrop(v any, path []string) {
	obj, ok := v.(refObject)
	if !ok || len(path) == 0 {
		return
	}
	if len(path) == 1 {
		delete(obj, path[0])
		return
	}
	refDrop(obj[path[0]], path[1:])
}

func refEncode(buf *bytes.Buffer, v any) error {
	switch t := v.(type) {
	case refObject:
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
			refString(buf, k)
			buf.WriteByte(':')
			if err := refEncode(buf, t[k]); err != nil {
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
			if err := refEncode(buf, e); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
	case string:
		refString(buf, t)
	case json.Number:
		n, err := refNumber(string(t))
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

func refString(buf *bytes.Buffer, s string) {
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	buf.Truncate(buf.Len() - 1)
}

func refNumber(s string) (string, error) {
	if !strings.ContainsAny(s, ".eE") {
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
