// Package importcheck enforces in tests which packages a source file may import, so that the
// pure cores (policy, kvindex, the kvevents stream machine, the sim engine, workload) stay free
// of I/O, clocks, logging, metrics and transports (STYLE §2.1).
//
//	func TestImports(t *testing.T) {
//		importcheck.Deny(t, importcheck.SourceFiles(t, "."), "net", "os", "log", "github.com/prometheus/")
//	}
package importcheck

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// SourceFiles returns the non-test .go files of dir, and fails t if there are none.
func SourceFiles(t testing.TB, dir string) []string {
	t.Helper()
	all, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatalf("importcheck: glob %s: %v", dir, err)
	}
	var files []string
	for _, f := range all {
		if !strings.HasSuffix(f, "_test.go") {
			files = append(files, f)
		}
	}
	if len(files) == 0 {
		t.Fatalf("importcheck: no source files in %s", dir)
	}
	return files
}

// Deny fails t for every import of files that matches a denied path. A denied path matches
// itself and every package below it ("net" matches "net/http" but not "netip"); one ending in
// "/" matches every path that starts with it.
func Deny(t testing.TB, files []string, denied ...string) {
	t.Helper()
	for _, file := range files {
		for _, imp := range Imports(t, file) {
			if bad, ok := match(imp, denied); ok {
				t.Errorf("%s imports %q (denied: %q)", file, imp, bad)
			}
		}
	}
}

// Imports returns the import paths of one file.
func Imports(t testing.TB, file string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ImportsOnly)
	if err != nil {
		t.Fatalf("importcheck: parse %s: %v", file, err)
	}
	paths := make([]string, 0, len(f.Imports))
	for _, imp := range f.Imports {
		p, err := strconv.Unquote(imp.Path.Value)
		if err != nil {
			t.Fatalf("importcheck: %s: import %s: %v", file, imp.Path.Value, err)
		}
		paths = append(paths, p)
	}
	return paths
}

func match(path string, denied []string) (string, bool) {
	for _, d := range denied {
		if strings.HasSuffix(d, "/") {
			if strings.HasPrefix(path, d) {
				return d, true
			}
			continue
		}
		if path == d || strings.HasPrefix(path, d+"/") {
			return d, true
		}
	}
	return "", false
}
