package policy

import (
	"testing"

	"github.com/condisagg/condisagg/internal/importcheck"
)

// TestPure parses every non-test file of the package (imports only) and fails on any import
// that would give policy I/O, a clock source of its own, logging, metrics or a forbidden
// dependency (STYLE §2.1; ARCHITECTURE §3).
func TestPure(t *testing.T) {
	importcheck.Deny(t, importcheck.SourceFiles(t, "."), "net", "os", "log", "io", "syscall",
		"github.com/prometheus/", "github.com/go-zeromq/", "github.com/condisagg/condisagg/kvindex",
		"github.com/condisagg/condisagg/extproc", "github.com/condisagg/condisagg/cmd")
}
