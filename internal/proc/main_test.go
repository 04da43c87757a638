package proc

import (
	"fmt"
	"os"
	"testing"

	"github.com/condisagg/condisagg/internal/leakcheck"
)

// helperEnv makes the test binary act as a parent that starts a child and dies without
// stopping it (TestParentDeathKillsChild).
const helperEnv = "PROC_TEST_ORPHAN_CHILD"

// TestMain runs the orphaning helper when asked to, else the tests and a goroutine-leak check:
// every reaper must be gone once its test has stopped its process.
func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		orphanChild()
	}
	leakcheck.Main(m)
}

// orphanChild starts `sleep 60`, prints its pid and exits without Stop.
func orphanChild() {
	p, err := Start(Config{Path: "sleep", Args: []string{"60"}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fmt.Println(p.cmd.Process.Pid)
	os.Exit(0)
}
