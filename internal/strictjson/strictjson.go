// Package strictjson is the one strict JSON decoder of onceq's payloads
// and bodies, shared by the library (which re-exports its errors as
// onceq.ErrInvalid and onceq.ErrMalformed) and the daemon's doors (the
// HTTP API, batch files, the checkout demo).
package strictjson

import (
	"errors"
	"fmt"

	jsonv2 "github.com/go-json-experiment/json"
)

// ErrInvalid is onceq.ErrInvalid.
var ErrInvalid = errors.New("invalid payload")

// ErrMalformed is onceq.ErrMalformed.
var ErrMalformed = fmt.Errorf("%w: malformed JSON", ErrInvalid)

// Decode strictly decodes one JSON payload into v: invalid UTF-8, duplicate
// member names, names that match a field only in another case, unknown
// fields, trailing data and wrong types are errors wrapping ErrMalformed
// (and so ErrInvalid). With last-one-wins or case folding,
// `"amount":1,"Amount":9` would charge 9 while a reviewer of the body reads
// 1. The JSON v2 decoder has these modes by default; we only add the
// rejection of unknown members.
func Decode(data []byte, v any) error {
	if err := jsonv2.Unmarshal(data, v, jsonv2.RejectUnknownMembers(true)); err != nil {
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return nil
}
