package dedup

import (
	"errors"
	"testing"
)

// The JSON v2 module words its errors "cannot" or "unable to" at random
// per process; onceq's messages read the same on every run (the examples
// and docs print them).
func TestStableMessage(t *testing.T) {
	for in, want := range map[string]string{
		`json: unable to unmarshal JSON string into Go T: unknown object member name "x"`: `json: cannot unmarshal JSON string into Go T: unknown object member name "x"`,
		`json: cannot unmarshal JSON string into Go T`:                                    `json: cannot unmarshal JSON string into Go T`,
		`jsontext: invalid character`:                                                     `jsontext: invalid character`,
	} {
		if got := stableMessage(errors.New(in)); got != want {
			t.Errorf("stableMessage(%q) = %q, want %q", in, got, want)
		}
	}
}
