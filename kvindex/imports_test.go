package kvindex

import (
	"strings"
	"testing"

	"github.com/condisagg/condisagg/internal/importcheck"
)

// TestImports keeps kvindex a pure core (STYLE.md §2.1): no I/O, logging, metrics or transport
// packages, and of the project only the internal/openaddr leaf, in non-test files.
func TestImports(t *testing.T) {
	files := importcheck.SourceFiles(t, ".")
	importcheck.Deny(t, files, "net", "os", "log", "io/fs", "syscall", "github.com/prometheus/", "github.com/go-zeromq/")
	const project = "github.com/condisagg/condisagg/"
	for _, f := range files {
		for _, imp := range importcheck.Imports(t, f) {
			if strings.HasPrefix(imp, "github.com/condisagg/") && imp != project+"internal/openaddr" {
				t.Errorf("%s imports %q: kvindex may import only internal/openaddr of the project", f, imp)
			}
		}
	}
}
