package e2e

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestParallelOrSaysWhy: each top-level test of this package either calls
// t.Parallel() first or says in its doc comment why it is serial
// ("Serial: ..."). A serial test adds its whole time to the suite's (the
// parallel ones only start once every serial one has ended), so being
// serial is a decision to write down, not a default to forget.
func TestParallelOrSaysWhy(t *testing.T) {
	t.Parallel()
	_, file, _, _ := runtime.Caller(0)
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(filepath.Dir(file), "*_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range files {
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Test") || fn.Name.Name == "TestMain" {
				continue
			}
			if callsParallelFirst(fn) || strings.Contains(fn.Doc.Text(), "Serial") {
				continue
			}
			t.Errorf("%s (%s): neither t.Parallel() as its first statement nor a \"Serial: why\" in its doc comment (docs/tests.md says which tests may run in parallel)",
				fn.Name.Name, filepath.Base(path))
		}
	}
}

func callsParallelFirst(fn *ast.FuncDecl) bool {
	if len(fn.Body.List) == 0 {
		return false
	}
	es, ok := fn.Body.List[0].(*ast.ExprStmt)
	if !ok {
		return false
	}
	call, ok := es.X.(*ast.CallExpr)
	if !ok {
		return false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	return ok && sel.Sel.Name == "Parallel"
}
