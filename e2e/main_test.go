package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/condisagg/condisagg/internal/leakcheck"

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
	// A quiet 2-core machine builds the binaries in about a minute; the bound is for a starved
	// one (make chaos beside other work), where 5 minutes was not enough.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	if bin, err = Build(ctx, dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// Every process watcher and client connection of the stacks must be gone once their tests end.
	return leakcheck.Run(m)
}
