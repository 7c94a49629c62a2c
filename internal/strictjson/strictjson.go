// Package strictjson is the daemon's strict JSON decoder for what is not a
// task payload (webhook envelopes, batch and outbox lines): the rule the
// library applies to payloads (dedup.Catalog.Build), with its errors, so
// one mapping turns both into a 400 or an exit code.
package strictjson

import (
	"fmt"
	"strings"

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
		// The JSON v2 module says "cannot" or "unable to" at random per
		// process; the library's decode fixes it, and so does this.
		return fmt.Errorf("%w: %s", ErrMalformed, strings.Replace(err.Error(), "json: unable to ", "json: cannot ", 1))
	}
	return nil
}
