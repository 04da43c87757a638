package kvindex

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImports keeps kvindex a pure core (STYLE.md §2.1): no I/O, logging, metrics or transport
// packages, and nothing of the project, in non-test files.
func TestImports(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	forbidden := []string{"net", "os", "log", "log/slog", "io/fs", "syscall", "github.com/prometheus/",
		"github.com/go-zeromq/", "github.com/condisagg/"}
	checked := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, imp := range af.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			for _, bad := range forbidden {
				if path == bad || strings.HasPrefix(path, bad+"/") || strings.HasSuffix(bad, "/") && strings.HasPrefix(path, bad) {
					t.Errorf("%s imports %q: kvindex must stay I/O-free and import nothing of the project", f, path)
				}
			}
		}
	}
	if checked < 5 {
		t.Fatalf("checked only %d non-test files", checked)
	}
}
