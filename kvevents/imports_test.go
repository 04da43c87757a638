package kvevents

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"testing"
)

// TestStreamMachineIsPure checks that the stream machine stays a functional core (STYLE.md
// §2.1): stream.go imports only formatting and its digest, and starts no goroutine.
func TestStreamMachineIsPure(t *testing.T) {
	allowed := map[string]bool{"fmt": true, "github.com/zeebo/xxh3": true}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "stream.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		if !allowed[path] {
			t.Errorf("stream.go imports %q: the stream machine must not do I/O, logging, metrics, clock or goroutines", path)
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.GoStmt:
			t.Errorf("%s: go statement in the stream machine", fset.Position(n.Pos()))
		case *ast.SelectStmt:
			t.Errorf("%s: select in the stream machine", fset.Position(n.Pos()))
		}
		return true
	})
}
