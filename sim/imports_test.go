package sim

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"strings"
	"testing"

	"github.com/condisagg/condisagg/internal/importcheck"
)

// project is the module path; sim may import only kvindex, cost and internal/splitmix of it
// (ARCHITECTURE §3).
const project = "github.com/condisagg/condisagg/"

// TestPureImports keeps the engine a functional core (STYLE.md §2.1) that a discrete-event
// simulator can drive in virtual time and that builds with CGO_ENABLED=0: no network, files,
// logging, metrics, locks, cgo, ZeroMQ or wire encoding, and nothing of the project but
// kvindex, cost and internal/splitmix. Every non-test file is checked, so a new file is covered without editing this list.
func TestPureImports(t *testing.T) {
	files := importcheck.SourceFiles(t, ".")
	importcheck.Deny(t, files, "net", "os", "log", "io", "syscall", "sync", "runtime", "unsafe", "C",
		"github.com/prometheus/", "github.com/go-zeromq/", "github.com/tinylib/msgp")
	for _, f := range files {
		for _, imp := range importcheck.Imports(t, f) {
			if strings.HasPrefix(imp, project) && imp != project+"kvindex" && imp != project+"cost" && imp != project+"internal/splitmix" {
				t.Errorf("%s imports %q: sim may import only kvindex, cost and internal/splitmix of the project", f, imp)
			}
		}
	}
}

// clockCalls are the package time functions that read or wait on the wall clock. The engine
// takes time only as Step's now argument; time.Duration arithmetic is fine.
var clockCalls = map[string]bool{
	"Now": true, "Since": true, "Until": true, "Sleep": true, "After": true, "AfterFunc": true,
	"Tick": true, "NewTimer": true, "NewTicker": true,
}

// TestNoGoroutinesOrClock fails on go and select statements and on wall-clock calls in any
// non-test file: one goroutine owns an Engine, and the caller supplies time.
func TestNoGoroutinesOrClock(t *testing.T) {
	for _, name := range importcheck.SourceFiles(t, ".") {
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		timeName := ""
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == "time" {
				timeName = "time"
				if imp.Name != nil {
					timeName = imp.Name.Name
				}
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GoStmt:
				t.Errorf("%s: go statement in the engine", fset.Position(n.Pos()))
			case *ast.SelectStmt:
				t.Errorf("%s: select in the engine", fset.Position(n.Pos()))
			case *ast.SelectorExpr:
				if x, ok := n.X.(*ast.Ident); ok && timeName != "" && x.Name == timeName && clockCalls[n.Sel.Name] {
					t.Errorf("%s: time.%s reads the wall clock; the engine gets time from Step(now)", fset.Position(n.Pos()), n.Sel.Name)
				}
			}
			return true
		})
	}
}
