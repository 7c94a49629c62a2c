package onceq_test

import (
	"testing"
	"time"

	"github.com/onceq/onceq"
)

// A misspelt repeat policy is a malformed Spec, refused when it is defined,
// not a quiet "reject" at the first repeat.
func TestDefineRefusesBadRepeat(t *testing.T) {
	t.Parallel()
	for _, r := range []onceq.Repeat{{Policy: "replce"}, {Policy: "debounce"}, {Policy: "debounce", Delay: time.Minute, MaxWait: time.Second}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Define accepted repeat %+v", r)
				}
			}()
			onceq.Define(onceq.Spec[struct{}]{Type: "t:bad", Repeat: r})
		}()
	}
	for _, r := range []onceq.Repeat{{}, {Policy: "reject"}, {Policy: "replace"}, {Policy: "debounce", Delay: time.Second, MaxWait: time.Minute}} {
		onceq.Define(onceq.Spec[struct{}]{Type: "t:good", Repeat: r})
	}
}
