package kvindex

import (
	"testing"

	"github.com/condisagg/condisagg/internal/importcheck"
)

// TestImports keeps kvindex a pure core (STYLE.md §2.1): no I/O, logging, metrics or transport
// packages, and nothing of the project, in non-test files.
func TestImports(t *testing.T) {
	importcheck.Deny(t, importcheck.SourceFiles(t, "."), "net", "os", "log", "io/fs", "syscall",
		"github.com/prometheus/", "github.com/go-zeromq/", "github.com/condisagg/")
}
