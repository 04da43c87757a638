package sim

import (
	"testing"

	"github.com/condisagg/condisagg/internal/importcheck"
)

// TestCoreImports keeps the engine core pure (STYLE.md §2.1): no network, file system,
// logging, metrics or ZeroMQ, so a discrete-event simulator can drive it in virtual time.
func TestCoreImports(t *testing.T) {
	core := []string{"cost.go", "blocks.go", "engine.go", "step.go"}
	importcheck.Deny(t, core, "net", "os", "log", "github.com/prometheus", "github.com/go-zeromq", "sync")
}
