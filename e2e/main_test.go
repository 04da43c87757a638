package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/condisagg/condisagg/envoy"
)

// bin holds the binaries built once for the whole test run (set by TestMain, read-only after).
var bin Binaries

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		return m.Run() // every test skips: the suite starts external processes
	}
	if _, err := envoy.FindBinary(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	dir, err := os.MkdirTemp("", "condisagg-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if bin, err = Build(ctx, dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	base := runtime.NumGoroutine()
	code := m.Run()
	if code == 0 && !goroutinesSettle(base, 5*time.Second) {
		buf := make([]byte, 1<<20)
		n := runtime.Stack(buf, true)
		fmt.Fprintf(os.Stderr, "e2e: goroutine leak: %d goroutines after the tests, %d before\n%s\n",
			runtime.NumGoroutine(), base, buf[:n])
		code = 1
	}
	return code
}

// goroutinesSettle waits, yielding, until at most base goroutines remain: every process
// watcher and client connection of the stacks must be gone once their tests end.
func goroutinesSettle(base int, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			return false
		}
		runtime.Gosched()
	}
	return true
}
