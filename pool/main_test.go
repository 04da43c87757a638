package pool

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
)

// TestMain ends the package's tests with a goroutine-leak check: every goroutine this package
// starts (Run's loops, ScrapeAll's workers) is waited for before its caller returns, so none
// may still be running once the tests are done.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaked := leakedGoroutines(); leaked != "" {
			fmt.Fprintf(os.Stderr, "goroutine leak:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

func leakedGoroutines() string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var leaked []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "condisagg/pool.(*Pool)") {
			leaked = append(leaked, g)
		}
	}
	return strings.Join(leaked, "\n\n")
}
