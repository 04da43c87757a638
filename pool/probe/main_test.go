package probe

import (
	"testing"

	"github.com/condisagg/condisagg/internal/leakcheck"
)

// TestMain ends the tests with a goroutine-leak check.
func TestMain(m *testing.M) { leakcheck.Main(m, "condisagg/pool/probe.(*Shell)") }
