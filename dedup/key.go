package dedup

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxIDLen bounds an idempotency id so a hostile header cannot blow up Redis keys.
const MaxIDLen = 255

// ErrInvalidKey is returned for a namespace or id that cannot be used as a key.
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

// HashMark starts every id onceq hashes, and no caller id is used as is when
// it starts with it: a content hash ("~" + 64 hex digits) and a hashed caller
// key ("~k" + 64 hex digits) live in their own space, so no key a caller
// chooses can equal another job's hash.
const HashMark = "~"

// ContentID is the id of a job keyed by its content: HashMark and the hex
// SHA-256 of its canonical payload (the sum the fingerprint encodes). Hex,
// not the fingerprint's base64url: ids stay free of '-', where asynqmon's
// list view cuts task ids.
func ContentID(sum [32]byte) string { return HashMark + hex.EncodeToString(sum[:]) }

// CallerID is the id for a caller-chosen key (a business id, an
// Idempotency-Key): the key itself when it is a valid id that does not start
// with HashMark, else "~k" + the hex SHA-256 of the key, so keys with spaces,
// braces or too many bytes stay usable and distinct. Empty is an error.
func CallerID(namespace, id string) (string, error) {
	if id == "" {
		return "", fmt.Errorf("%w: empty id", ErrInvalidKey)
	}
	if _, err := NewKey(namespace, id); err == nil && !strings.HasPrefix(id, HashMark) {
		return id, nil
	}
	sum := sha256.Sum256([]byte(id))
	return HashMark + "k" + hex.EncodeToString(sum[:]), nil
}

// String is "namespace/id"; onceq also uses it as the asynq task id.
func (k Key) String() string { return k.Namespace + "/" + k.ID }

// ParseKey is the inverse of Key.String.
func ParseKey(s string) (Key, error) {
	ns, id, ok := strings.Cut(s, "/")
	if !ok {
		return Key{}, fmt.Errorf("%w: %q is not namespace/id", ErrInvalidKey, s)
	}
	return NewKey(ns, id)
}

type ctxKey struct{}

// WithKey returns a context carrying the idempotency key of the job being run.
func WithKey(ctx context.Context, k Key) context.Context {
	return context.WithValue(ctx, ctxKey{}, k)
}

// KeyFromContext returns the idempotency key the middleware claimed for this
// handler. Handlers pass DownstreamKey, which adds the incarnation, downstream
// (SMTP Message-ID, a gateway's Idempotency-Key) so a crash between the
// effect and Complete does not double it.
func KeyFromContext(ctx context.Context) (Key, bool) {
	k, ok := ctx.Value(ctxKey{}).(Key)
	return k, ok
}
