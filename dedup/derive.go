package dedup

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
)

// Derive computes the idempotency key and fingerprint of a JSON payload.
// The id is, in order: explicit (a business key or an Idempotency-Key
// header), the payload's top-level "dedup_key", its top-level "id" (a string
// or an integer), each made an id by CallerID; else ContentID of the
// payload's SHA-256. The fingerprint is always Hash of the whole payload
// without volatile fields, so a key reused with another payload is detected
// as a Mismatch. One pass over the payload does both.
func Derive(namespace string, payload []byte, explicit string, volatile []string) (Key, string, error) {
	c := getCanon()
	defer putCanon(c)
	if err := c.run(payload, volatile); err != nil {
		return Key{}, "", fmt.Errorf("dedup: derive %s: %w", namespace, err)
	}
	fp := c.fingerprint()
	id := explicit
	if id == "" {
		id = c.idValue()
	}
	if id == "" {
		id = ContentID(c.sum)
	} else {
		var err error
		if id, err = CallerID(namespace, id); err != nil {
			return Key{}, "", fmt.Errorf("dedup: derive %s: %w", namespace, err)
		}
	}
	k, err := NewKey(namespace, id)
	if err != nil {
		return Key{}, "", fmt.Errorf("dedup: derive %s: %w", namespace, err)
	}
	return k, fp, nil
}

// ParseFingerprint reads a fingerprint in either spelling: Hash's base64url
// or the hex that versions before it wrote into task headers and records.
func ParseFingerprint(s string) ([32]byte, error) {
	var sum [32]byte
	var err error
	switch len(s) {
	case base64.RawURLEncoding.EncodedLen(len(sum)):
		_, err = base64.RawURLEncoding.Decode(sum[:], []byte(s))
	case hex.EncodedLen(len(sum)):
		_, err = hex.Decode(sum[:], []byte(s))
	default:
		err = fmt.Errorf("length %d", len(s))
	}
	if err != nil {
		return sum, fmt.Errorf("dedup: fingerprint %q: %w", s, err)
	}
	return sum, nil
}

// SameFingerprint reports whether a and b are the same fingerprint, perhaps
// spelled differently (hex from an older producer, base64url from a newer
// one). Strings that are not fingerprints compare as they are.
func SameFingerprint(a, b string) bool {
	if a == b {
		return true
	}
	x, errA := ParseFingerprint(a)
	y, errB := ParseFingerprint(b)
	return errA == nil && errB == nil && x == y
}
