package dedup_test

import (
	"testing"
	"time"

	"github.com/onceq/onceq/dedup"
)

// A misspelt repeat policy is a malformed Spec, refused when it is defined,
// not a quiet "reject" at the first repeat.
func TestDefineRefusesBadRepeat(t *testing.T) {
	t.Parallel()
	for _, r := range []dedup.Repeat{{Policy: "replce"}, {Policy: "debounce"}, {Policy: "debounce", Delay: time.Minute, MaxWait: time.Second}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Define accepted repeat %+v", r)
				}
			}()
			dedup.Define(dedup.Spec[struct{}]{Type: "t:bad", Repeat: r})
		}()
	}
	for _, r := range []dedup.Repeat{{}, {Policy: "reject"}, {Policy: "replace"}, {Policy: "debounce", Delay: time.Second, MaxWait: time.Minute}} {
		dedup.Define(dedup.Spec[struct{}]{Type: "t:good", Repeat: r})
	}
}
