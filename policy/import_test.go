package policy

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestPure parses every non-test file of the package (imports only) and fails on any import
// that would give policy I/O, a clock source of its own, logging, metrics or a forbidden
// dependency (STYLE §2.1; ARCHITECTURE §3).
func TestPure(t *testing.T) {
	forbidden := []string{"net", "os", "log", "io", "syscall", "github.com/prometheus/", "github.com/go-zeromq/",
		"github.com/condisagg/condisagg/kvindex", "github.com/condisagg/condisagg/extproc", "github.com/condisagg/condisagg/cmd"}
	files, err := filepath.Glob("*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("glob: %v (%d files)", err, len(files))
	}
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, src, parser.ImportsOnly)
		if err != nil {
			t.Fatalf("parse %s: %v", name, err)
		}
		checked++
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			for _, bad := range forbidden {
				if path == bad || strings.HasPrefix(path, strings.TrimSuffix(bad, "/")+"/") {
					t.Errorf("%s imports %q: policy must stay pure", name, path)
				}
			}
		}
	}
	if checked < 5 {
		t.Fatalf("only %d source files checked", checked)
	}
}
