package pgledger_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The docs name only what exists: every ErrX, StateX and StatusX a comment
// of this package mentions is declared here or in the library.
func TestDocsNameWhatExists(t *testing.T) {
	declared := map[string]bool{}
	var comments []string
	for _, dir := range []string{".", "../dedup", "../dedup/storage"} {
		for _, f := range parseDir(t, dir) {
			for _, d := range f.Decls {
				switch d := d.(type) {
				case *ast.FuncDecl:
					declared[d.Name.Name] = true
				case *ast.GenDecl:
					for _, s := range d.Specs {
						switch s := s.(type) {
						case *ast.TypeSpec:
							declared[s.Name.Name] = true
						case *ast.ValueSpec:
							for _, n := range s.Names {
								declared[n.Name] = true
							}
						}
					}
				}
			}
			if dir == "." {
				for _, c := range f.Comments {
					comments = append(comments, c.Text())
				}
			}
		}
	}
	name := regexp.MustCompile(`\b(?:Err|State|Status)[A-Z]\w*\b`)
	for _, c := range comments {
		for _, n := range name.FindAllString(c, -1) {
			if !declared[n] {
				t.Errorf("a comment names %s, which is declared nowhere: %q", n, strings.TrimSpace(c))
			}
		}
	}
}

func parseDir(t *testing.T, dir string) []*ast.File {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, e := range entries {
		if n := e.Name(); strings.HasSuffix(n, ".go") && !strings.HasSuffix(n, "_test.go") {
			f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, n), nil, parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
		}
	}
	return files
}
