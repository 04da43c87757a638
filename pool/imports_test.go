package pool

import (
	"go/ast"
	"go/parser"
	"go/token"
	"testing"

	"github.com/condisagg/condisagg/internal/importcheck"
)

// TestCoreDoesNoIO keeps pool a pure core (doc.go): no HTTP, files, processes or transports
// in non-test files (pool/probe does them). The net package itself (while net/url and
// net/netip are fine) is internal/layers' TestPureCoresDoNoIO's to check.
func TestCoreDoesNoIO(t *testing.T) {
	importcheck.Deny(t, importcheck.SourceFiles(t, "."), "net/http", "os", "syscall", "github.com/go-zeromq/")
}

// TestNoGoroutinesOrWallClock fails on go statements, calls of a Go method (WaitGroup.Go,
// errgroup) and reads of the wall clock in
// non-test files: the pool starts no goroutine, and every time it uses comes from
// Options.Clock (systemClock.Now, the default, is the one exception).
func TestNoGoroutinesOrWallClock(t *testing.T) {
	clockCalls := map[string]bool{"Now": true, "Since": true, "Until": true, "Sleep": true, "After": true,
		"AfterFunc": true, "Tick": true, "NewTimer": true, "NewTicker": true}
	for _, name := range importcheck.SourceFiles(t, ".") {
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			if fn, ok := decl.(*ast.FuncDecl); ok && fn.Name.Name == "Now" && fn.Recv != nil &&
				recvType(fn.Recv) == "systemClock" {
				continue
			}
			ast.Inspect(decl, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.GoStmt:
					t.Errorf("%s: go statement in the pool core", fset.Position(n.Pos()))
				case *ast.CallExpr:
					if sel, ok := n.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Go" {
						t.Errorf("%s: a Go call starts a goroutine in the pool core", fset.Position(n.Pos()))
					}
				case *ast.SelectorExpr:
					if x, ok := n.X.(*ast.Ident); ok && x.Name == "time" && clockCalls[n.Sel.Name] {
						t.Errorf("%s: time.%s reads the wall clock; use Options.Clock", fset.Position(n.Pos()), n.Sel.Name)
					}
				}
				return true
			})
		}
	}
}

// recvType returns the name of a method's receiver type.
func recvType(recv *ast.FieldList) string {
	if id, ok := recv.List[0].Type.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}
