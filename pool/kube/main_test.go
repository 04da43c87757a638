package kube

import (
	"testing"

	"github.com/condisagg/condisagg/internal/leakcheck"
)

// TestMain ends the tests with a goroutine-leak check: the watcher's loop and every informer
// it started (client-go's reflector and processor goroutines) must have stopped.
func TestMain(m *testing.M) {
	leakcheck.Main(m, "condisagg/pool/kube.", "k8s.io/client-go/tools/cache.")
}
