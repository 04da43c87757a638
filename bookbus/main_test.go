package bookbus

import (
	"testing"

	"github.com/condisagg/condisagg/internal/leakcheck"
)

// TestMain ends the tests with a goroutine-leak check: the bus's loop, the NATS client's and
// the embedded server's goroutines must all be gone.
func TestMain(m *testing.M) {
	leakcheck.Main(m, "condisagg/bookbus.", "nats-io/nats.go", "nats-io/nats-server")
}
