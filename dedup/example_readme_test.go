package dedup_test

import (
	"errors"
	"io/fs"
	"os"
	"strings"
	"testing"
)

// The repository README's Go quick start is the package Example with its
// Redis set-up left out: each paragraph of the README's first go block
// appears, as is or indented one tab, in example_test.go. A README edit
// that the example does not make, or the reverse, fails here instead of
// going stale. (A copy of the module without the repository has no README
// above it: nothing to compare.)
func TestREADMEQuickStartIsTheExample(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if errors.Is(err, fs.ErrNotExist) {
		t.Skip("no repository README above the module")
	}
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(readme), "\n```go\n")
	if ok {
		block, _, ok = strings.Cut(block, "\n```\n")
	}
	if !ok {
		t.Fatal("README.md has no ```go block")
	}
	for para := range strings.SplitSeq(block, "\n\n") {
		if para = strings.TrimSuffix(para, "\n") + "\n"; strings.Contains(string(example), para) {
			continue
		}
		indented := "\t" + strings.ReplaceAll(strings.TrimSuffix(para, "\n"), "\n", "\n\t") + "\n"
		if !strings.Contains(string(example), indented) {
			t.Errorf("README quick start has lines example_test.go does not:\n%s", para)
		}
	}
}
