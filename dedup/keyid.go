package dedup

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/onceq/onceq/dedup/storage"
)

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
		return "", fmt.Errorf("%w: empty id", storage.ErrInvalidKey)
	}
	if _, err := storage.NewKey(namespace, id); err == nil && !strings.HasPrefix(id, hashMark) {
		return id, nil
	}
	sum := sha256.Sum256([]byte(id))
	return hashMark + "k" + hex.EncodeToString(sum[:]), nil
}

// usableID reports why id cannot be used as the id of a key of namespace
// as given: empty, not a valid key id, or starting with hashMark.
func usableID(namespace, id string) error {
	if strings.HasPrefix(id, hashMark) {
		return fmt.Errorf("id %q starts with %q, which hashed ids start with", id, hashMark)
	}
	_, err := storage.NewKey(namespace, id)
	return err
}
