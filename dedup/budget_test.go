package dedup_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The library's API stays small: go doc -short lists at most 45
// declarations (what an application uses; what only a Store implementer
// needs is in package storage), and every exported name, methods and
// constants included, has a doc comment. A new one pays for itself by
// removing another.
func TestExportedBudget(t *testing.T) {
	out, err := exec.Command("go", "doc", "-short", ".").Output()
	if err != nil {
		t.Fatalf("go doc -short: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) > 45 {
		t.Errorf("go doc -short lists %d declarations, over the budget of 45:\n%s", len(lines), out)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if n := e.Name(); strings.HasSuffix(n, ".go") && !strings.HasSuffix(n, "_test.go") {
			f, err := parser.ParseFile(fset, n, nil, parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
		}
	}
	var names []string
	add := func(name string, docs ...*ast.CommentGroup) {
		names = append(names, name)
		if !slices.ContainsFunc(docs, func(c *ast.CommentGroup) bool { return c != nil }) {
			t.Errorf("%s has no doc comment", name)
		}
	}
	for _, f := range files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() || (d.Recv != nil && !exportedRecv(d.Recv.List[0].Type)) {
					continue
				}
				add(d.Name.Name, d.Doc)
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							add(s.Name.Name, s.Doc, d.Doc)
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								add(n.Name, s.Doc, s.Comment, d.Doc)
							}
						}
					}
				}
			}
		}
	}
	t.Logf("go doc -short: %d declarations; %d exported names in all", len(lines), len(names))
}

func exportedRecv(e ast.Expr) bool {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			return x.IsExported()
		default:
			return false
		}
	}
}
