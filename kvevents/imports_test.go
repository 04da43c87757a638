package kvevents

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"strings"
	"testing"

	"github.com/condisagg/condisagg/internal/importcheck"
)

// TestCoreImports keeps the package a cgo-free core (ARCHITECTURE §3, STYLE.md §2.1): no cgo,
// ZeroMQ, network, file system, clock, logging, locks or goroutine control in non-test files,
// and of the project only kvindex. The transport belongs in kvevents/zmq.
func TestCoreImports(t *testing.T) {
	files := importcheck.SourceFiles(t, ".")
	importcheck.Deny(t, files, "C", "unsafe", "runtime", "syscall", "net", "os", "io/fs", "log",
		"time", "sync", "context", "github.com/go-zeromq/")
	const project = "github.com/condisagg/condisagg/"
	for _, file := range files {
		for _, imp := range importcheck.Imports(t, file) {
			if strings.HasPrefix(imp, project) && imp != project+"kvindex" {
				t.Errorf("%s imports %q: of the project, kvevents may import only kvindex", file, imp)
			}
		}
	}
}

// TestCoreStartsNoGoroutines checks that no non-test file starts a goroutine or waits on
// channels: the Applier and the Stream run on their caller's goroutine.
func TestCoreStartsNoGoroutines(t *testing.T) {
	for _, file := range importcheck.SourceFiles(t, ".") {
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GoStmt:
				t.Errorf("%s: go statement in the core", fset.Position(n.Pos()))
			case *ast.SelectStmt:
				t.Errorf("%s: select in the core", fset.Position(n.Pos()))
			}
			return true
		})
	}
}

// TestStreamMachineIsPure checks that the stream machine stays a functional core (STYLE.md
// §2.1): stream.go imports only formatting and its digest, not even the metrics the Applier
// uses.
func TestStreamMachineIsPure(t *testing.T) {
	allowed := map[string]bool{"fmt": true, "github.com/zeebo/xxh3": true}
	f, err := parser.ParseFile(token.NewFileSet(), "stream.go", nil, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		if !allowed[path] {
			t.Errorf("stream.go imports %q: the stream machine must not do I/O, logging, metrics, clock or goroutines", path)
		}
	}
}
