package storage

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxIDLen bounds a key's namespace and id, in bytes, so a hostile header
// cannot blow up Redis keys.
const MaxIDLen = 255

// ErrInvalidKey is wrapped by the error for a namespace or id that cannot
// be used as a key.
var ErrInvalidKey = errors.New("dedup: invalid key")

// Key identifies one job for deduplication: the namespace (by default the task
// type, e.g. "email:send") and the id within it (a business key or a content hash).
type Key struct {
	Namespace string
	ID        string
}

// NewKey validates namespace and id. Both must be non-empty printable UTF-8
// without '{' or '}' (they would break the Redis Cluster hash tag) and the id
// must be at most MaxIDLen bytes.
func NewKey(namespace, id string) (Key, error) {
	if err := checkPart("namespace", namespace); err != nil {
		return Key{}, err
	}
	if strings.Contains(namespace, "/") {
		return Key{}, fmt.Errorf("%w: namespace %q contains '/'", ErrInvalidKey, namespace)
	}
	if err := checkPart("id", id); err != nil {
		return Key{}, err
	}
	return Key{Namespace: namespace, ID: id}, nil
}

func checkPart(what, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%w: empty %s", ErrInvalidKey, what)
	case len(s) > MaxIDLen:
		return fmt.Errorf("%w: %s longer than %d bytes", ErrInvalidKey, what, MaxIDLen)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %s is not valid UTF-8", ErrInvalidKey, what)
	case strings.ContainsAny(s, "{}"):
		return fmt.Errorf("%w: %s %q contains '{' or '}'", ErrInvalidKey, what, s)
	}
	for _, r := range s {
		if unicode.IsControl(r) || unicode.IsSpace(r) {
			return fmt.Errorf("%w: %s %q contains a control or space character", ErrInvalidKey, what, s)
		}
	}
	return nil
}

// String is "namespace/id"; onceq also uses it as the asynq task id.
func (k Key) String() string { return k.Namespace + "/" + k.ID }

// ParseKey reads either form an operator may paste: the key
// "namespace/id" (Key.String; it always has a '/') or the asynq task id
// onceq gave its job (Key.TaskID; it never has one).
func ParseKey(s string) (Key, error) {
	if strings.Contains(s, "/") {
		return parseKeyString(s)
	}
	k, err := KeyFromTaskID(s)
	if err != nil {
		return Key{}, fmt.Errorf("%w: %q is neither a key (namespace/id) nor an onceq task id", ErrInvalidKey, s)
	}
	return k, nil
}

// parseKeyString is the inverse of Key.String.
func parseKeyString(s string) (Key, error) {
	ns, id, ok := strings.Cut(s, "/")
	if !ok {
		return Key{}, fmt.Errorf("%w: %q is not namespace/id", ErrInvalidKey, s)
	}
	return NewKey(ns, id)
}
