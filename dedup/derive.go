package dedup

import (
	"fmt"
)

// derive computes the idempotency key and fingerprint of a JSON payload.
// The id is, in order: explicit (a business key or an Idempotency-Key
// header), the payload's top-level "dedup_key", its top-level "id" (a string
// or an integer), each made an id by callerID; else contentID of the
// payload's SHA-256. The fingerprint is always the SHA-256 of the whole canonical payload
// without volatile fields, so a key reused with another payload is detected
// as a Conflict. One pass over the payload does both.
func derive(namespace string, payload []byte, explicit string, volatile []string) (Key, string, error) {
	return deriveChecked(namespace, payload, explicit, volatile, false)
}

// deriveMarshalled is derive of what encoding/json wrote (marshal): valid
// JSON by construction, so the syntax check before the walk is skipped.
func deriveMarshalled(namespace string, payload []byte, explicit string, volatile []string) (Key, string, error) {
	return deriveChecked(namespace, payload, explicit, volatile, true)
}

func deriveChecked(namespace string, payload []byte, explicit string, volatile []string, marshalled bool) (Key, string, error) {
	c := getCanon()
	defer putCanon(c)
	if err := c.run(payload, volatile, marshalled); err != nil {
		return Key{}, "", fmt.Errorf("onceq: derive %s: %w", namespace, err)
	}
	fp := c.fingerprint()
	id := explicit
	if id == "" {
		id = c.idValue()
	}
	if id == "" {
		id = contentID(c.sum)
	} else {
		var err error
		if id, err = callerID(namespace, id); err != nil {
			return Key{}, "", fmt.Errorf("onceq: derive %s: %w", namespace, err)
		}
	}
	k, err := NewKey(namespace, id)
	if err != nil {
		return Key{}, "", fmt.Errorf("onceq: derive %s: %w", namespace, err)
	}
	return k, fp, nil
}
