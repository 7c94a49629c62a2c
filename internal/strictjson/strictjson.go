// Package strictjson is the daemon's strict JSON decoder for what is not a
// task payload (webhook envelopes, batch and outbox lines): the rule the
// library applies to payloads (dedup.Catalog.Build), with its errors, so
// one mapping turns both into a 400 or an exit code.
package strictjson

import (
	"fmt"

	jsonv2 "github.com/go-json-experiment/json"

	"github.com/onceq/onceq/dedup"
)

// ErrInvalid and ErrMalformed are the library's.
var (
	ErrInvalid   = dedup.ErrInvalid
	ErrMalformed = dedup.ErrMalformed
)

// Decode strictly decodes one JSON document into v, as the library decodes
// payloads: invalid UTF-8, duplicate member names, names that match a field
// only in another case, unknown members, trailing data and wrong types
// are errors wrapping ErrMalformed.
func Decode(data []byte, v any) error {
	if err := jsonv2.Unmarshal(data, v, jsonv2.RejectUnknownMembers(true)); err != nil {
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return nil
}
