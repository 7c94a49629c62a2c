package dedup

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxIDLen bounds an idempotency id so a hostile header cannot blow up Redis keys.
const maxIDLen = 255

// errInvalidKey is returned for a namespace or id that cannot be used as a key.
var errInvalidKey = errors.New("onceq: invalid key")

// Key identifies one job for deduplication: the namespace (by default the task
// type, e.g. "email:send") and the id within it (a business key or a content hash).
type Key struct {
	Namespace string
	ID        string
}

// NewKey validates namespace and id. Both must be non-empty printable UTF-8
// without '{' or '}' (they would break the Redis Cluster hash tag) and the id
// must be at most maxIDLen bytes.
func NewKey(namespace, id string) (Key, error) {
	if err := checkPart("namespace", namespace); err != nil {
		return Key{}, err
	}
	if strings.Contains(namespace, "/") {
		return Key{}, fmt.Errorf("%w: namespace %q contains '/'", errInvalidKey, namespace)
	}
	if err := checkPart("id", id); err != nil {
		return Key{}, err
	}
	return Key{Namespace: namespace, ID: id}, nil
}

func checkPart(what, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%w: empty %s", errInvalidKey, what)
	case len(s) > maxIDLen:
		return fmt.Errorf("%w: %s longer than %d bytes", errInvalidKey, what, maxIDLen)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %s is not valid UTF-8", errInvalidKey, what)
	case strings.ContainsAny(s, "{}"):
		return fmt.Errorf("%w: %s %q contains '{' or '}'", errInvalidKey, what, s)
	}
	for _, r := range s {
		if unicode.IsControl(r) || unicode.IsSpace(r) {
			return fmt.Errorf("%w: %s %q contains a control or space character", errInvalidKey, what, s)
		}
	}
	return nil
}

// hashMark starts every id onceq hashes, and no caller id is used as is when
// it starts with it: a content hash ("~" + 64 hex digits) and a hashed caller
// key ("~k" + 64 hex digits) live in their own space, so no key a caller
// chooses can equal another job's hash.
const hashMark = "~"

// contentID is the id of a job keyed by its content: hashMark and the hex
// SHA-256 of its canonical payload (the sum the fingerprint encodes). Hex,
// not the fingerprint's base64url: ids stay free of '-', where asynqmon's
// list view cuts task ids.
func contentID(sum [32]byte) string { return hashMark + hex.EncodeToString(sum[:]) }

// callerID is the id for a caller-chosen key (a business id, an
// Idempotency-Key): the key itself when it is a valid id that does not start
// with hashMark, else "~k" + the hex SHA-256 of the key, so keys with spaces,
// braces or too many bytes stay usable and distinct. Empty is an error.
func callerID(namespace, id string) (string, error) {
	if id == "" {
		return "", fmt.Errorf("%w: empty id", errInvalidKey)
	}
	if _, err := NewKey(namespace, id); err == nil && !strings.HasPrefix(id, hashMark) {
		return id, nil
	}
	sum := sha256.Sum256([]byte(id))
	return hashMark + "k" + hex.EncodeToString(sum[:]), nil
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
	k, err := keyFromTaskID(s)
	if err != nil {
		return Key{}, fmt.Errorf("%w: %q is neither a key (namespace/id) nor an onceq task id", errInvalidKey, s)
	}
	return k, nil
}

// parseKeyString is the inverse of Key.String.
func parseKeyString(s string) (Key, error) {
	ns, id, ok := strings.Cut(s, "/")
	if !ok {
		return Key{}, fmt.Errorf("%w: %q is not namespace/id", errInvalidKey, s)
	}
	return NewKey(ns, id)
}
