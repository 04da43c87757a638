package kvevents

import (
	"testing"

	"github.com/condisagg/condisagg/internal/leakcheck"
)

// TestMain ends the tests with a goroutine-leak check. The core starts none; the check keeps a
// test helper from starting one either. The marker's trailing dot leaves kvevents/zmq out.
func TestMain(m *testing.M) { leakcheck.Main(m, "condisagg/kvevents.") }
