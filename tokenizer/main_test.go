package tokenizer

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestMain fails the package when goroutines outlive the tests (the package
// starts none; the hub tests' HTTP servers must be shut down).
func TestMain(m *testing.M) {
	base := runtime.NumGoroutine()
	code := m.Run()
	if fuzzing() {
		// The fuzzing engine keeps its own goroutines running.
		os.Exit(code)
	}
	if code == 0 && !goroutinesSettle(base, 5*time.Second) {
		buf := make([]byte, 1<<20)
		n := runtime.Stack(buf, true)
		fmt.Fprintf(os.Stderr, "goroutine leak: %d goroutines after the tests, %d before\n%s\n",
			runtime.NumGoroutine(), base, leakedStacks(string(buf[:n])))
		code = 1
	}
	os.Exit(code)
}

func fuzzing() bool {
	for _, name := range []string{"test.fuzz", "test.fuzzworker"} {
		if f := flag.Lookup(name); f != nil && f.Value.String() != "" && f.Value.String() != "false" {
			return true
		}
	}
	return false
}

// goroutinesSettle waits, yielding, until at most base goroutines remain.
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

func leakedStacks(all string) string {
	var out []string
	for _, g := range strings.Split(all, "\n\n") {
		if !strings.Contains(g, "testing.(*M).Run") && !strings.Contains(g, "runtime.Stack") {
			out = append(out, g)
		}
	}
	return strings.Join(out, "\n\n")
}
