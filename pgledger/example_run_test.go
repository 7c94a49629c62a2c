package pgledger_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/onceq/onceq/pgledger/pgtest"
)

// ExampleHandle has no Output line, since go test runs examples on machines
// without Postgres too. This runs it where pgtest finds a Postgres and holds
// what it prints to what its comment says it prints.
func TestExampleHandlePrintsWhatItsCommentSays(t *testing.T) {
	want := documentedOutput(t, "example_test.go", "ExampleHandle")
	t.Setenv("DATABASE_URL", pgtest.New(t))

	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = w
	printed := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		printed <- string(b)
	}()
	ExampleHandle()
	os.Stdout = stdout
	w.Close()
	if got := <-printed; got != want {
		t.Fatalf("ExampleHandle printed\n%s\nits comment says\n%s", got, want)
	}
}

// documentedOutput is the tab-indented block after "It prints:" in the doc
// comment of fn in file.
func documentedOutput(t *testing.T, file, fn string) string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Name.Name == fn && fd.Doc != nil {
			_, block, ok := strings.Cut(fd.Doc.Text(), "It prints:\n\n")
			if !ok {
				break
			}
			var out strings.Builder
			for line := range strings.Lines(block) {
				if !strings.HasPrefix(line, "\t") {
					break
				}
				out.WriteString(strings.TrimPrefix(line, "\t"))
			}
			return out.String()
		}
	}
	t.Fatalf("%s: no doc comment on %s with an indented block after \"It prints:\"", file, fn)
	return ""
}
