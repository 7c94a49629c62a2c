package dedup

import (
	"encoding/json"
	"fmt"
)

// Derive computes the idempotency key and fingerprint of a JSON payload.
// The id is, in order: explicit (a business key or an Idempotency-Key
// header), the payload's top-level "dedup_key", its top-level "id" (a string
// or an integer), each made an id by CallerID; else ContentID of the hash. The fingerprint is always the hash
// of the whole canonical payload without volatile fields, so a key reused with
// another payload is detected as a Mismatch.
func Derive(namespace string, payload []byte, explicit string, volatile []string) (Key, string, error) {
	fp, err := Hash(payload, volatile...)
	if err != nil {
		return Key{}, "", fmt.Errorf("dedup: derive %s: %w", namespace, err)
	}
	id := explicit
	if id == "" {
		id = payloadID(payload)
	}
	if id == "" {
		id = ContentID(fp)
	} else if id, err = CallerID(namespace, id); err != nil {
		return Key{}, "", fmt.Errorf("dedup: derive %s: %w", namespace, err)
	}
	k, err := NewKey(namespace, id)
	if err != nil {
		return Key{}, "", fmt.Errorf("dedup: derive %s: %w", namespace, err)
	}
	return k, fp, nil
}

// payloadID returns the payload's own business key, if it names one. The
// payload was already validated by Hash.
func payloadID(payload []byte) string {
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
