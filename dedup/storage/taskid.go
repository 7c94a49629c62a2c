package storage

import (
	"fmt"
	"strings"
)

// The asynq task id of a job is its key in a form the asynqmon dashboard can
// route. asynqmon v0.7 puts the id in a URL path segment unescaped (so '/' —
// even as %2F — '%', '?' and '#' break its task page) and shortens ids in its
// lists at the first '-'. The encoding, applied to "namespace/id":
//
//	A-Z a-z 0-9 ':' '.' '_'   themselves
//	'/' (the separator)       '='
//	'-'                       '~'
//	any other byte            '!' and two upper-case hex digits
//
// so payment:charge/pmt-10 becomes payment:charge=pmt~10. '=', '~' and '!'
// are never copied, so the encoding is injective; '{' and '}' never appear
// (asynq forbids them in ids under Redis Cluster). TaskID and KeyFromTaskID
// are the only place it is written.

const hexDigits = "0123456789ABCDEF"

func taskIDSafe(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == ':' || c == '.' || c == '_'
}

// TaskID is the asynq task id onceq gives the job with key k: the
// encoding of k.String(), written from the two parts without building it.
func (k Key) TaskID() string {
	var b strings.Builder
	b.Grow(len(k.Namespace) + len(k.ID) + 9)
	writeTaskID(&b, k.Namespace)
	b.WriteByte('=') // the separator, '/'
	writeTaskID(&b, k.ID)
	return b.String()
}

func writeTaskID(b *strings.Builder, s string) {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case taskIDSafe(c):
			b.WriteByte(c)
		case c == '/':
			b.WriteByte('=')
		case c == '-':
			b.WriteByte('~')
		default:
			b.WriteByte('!')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&0xf])
		}
	}
}

// cutTaskID reports whether id starts with the encoding of s, and returns
// the rest of id: TaskID compared in place, without building it.
func cutTaskID(s, id string) (string, bool) {
	for i := 0; i < len(s); i++ {
		var want string
		switch c := s[i]; {
		case taskIDSafe(c):
			if id == "" || id[0] != c {
				return "", false
			}
			id = id[1:]
			continue
		case c == '/':
			want = "="
		case c == '-':
			want = "~"
		default:
			if len(id) < 3 || id[0] != '!' || id[1] != hexDigits[c>>4] || id[2] != hexDigits[c&0xf] {
				return "", false
			}
			id = id[3:]
			continue
		}
		if !strings.HasPrefix(id, want) {
			return "", false
		}
		id = id[len(want):]
	}
	return id, true
}

// isTaskIDOf reports whether id is exactly k.TaskID().
func isTaskIDOf(k Key, id string) bool {
	rest, ok := cutTaskID(k.Namespace, id)
	if !ok || !strings.HasPrefix(rest, "=") {
		return false
	}
	rest, ok = cutTaskID(k.ID, rest[1:])
	return ok && rest == ""
}

// KeyFromTaskID is the inverse of Key.TaskID. It accepts only what TaskID
// produces, so each key has exactly one task id.
func KeyFromTaskID(id string) (Key, error) {
	var b strings.Builder
	b.Grow(len(id))
	for i := 0; i < len(id); i++ {
		switch c := id[i]; {
		case c == '=':
			b.WriteByte('/')
		case c == '~':
			b.WriteByte('-')
		case c == '!' && i+2 < len(id) && strings.IndexByte(hexDigits, id[i+1]) >= 0 && strings.IndexByte(hexDigits, id[i+2]) >= 0:
			b.WriteByte(byte(strings.IndexByte(hexDigits, id[i+1])<<4 | strings.IndexByte(hexDigits, id[i+2])))
			i += 2
		default:
			b.WriteByte(c)
		}
	}
	k, err := parseKeyString(b.String())
	if err != nil {
		return Key{}, fmt.Errorf("%w: task id %q: not an onceq task id", ErrInvalidKey, id)
	}
	if !isTaskIDOf(k, id) {
		return Key{}, fmt.Errorf("%w: task id %q is not in canonical form (want %q)", ErrInvalidKey, id, k.TaskID())
	}
	return k, nil
}
