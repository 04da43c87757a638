// Package leakcheck ends a package's tests with a goroutine-leak check.
//
// Every goroutine a package starts must be stopped and waited for by its owner (STYLE §2.2).
// A package proves it with
//
//	func TestMain(m *testing.M) { leakcheck.Main(m, "condisagg/sim.") }
//
// which runs the tests and then fails the run if a goroutine whose stack mentions one of the
// markers is still alive after a short grace period (goroutines that are already exiting, such
// as HTTP transport readers after CloseIdleConnections, get that long to finish). With no
// markers, any goroutine beyond those alive before the tests counts. The check is skipped when
// the tests fail anyway and while fuzzing, whose engine keeps goroutines of its own.
package leakcheck

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Grace is how long Main waits for goroutines that are still exiting.
const Grace = 5 * time.Second

// Main runs m and exits the process with its code, or with 1 if goroutines leaked.
func Main(m *testing.M, markers ...string) { os.Exit(Run(m, markers...)) }

// Run is Main for a TestMain that has work of its own to do after the tests (removing a
// directory, say): it returns the exit code instead of exiting.
func Run(m *testing.M, markers ...string) int {
	base := runtime.NumGoroutine()
	code := m.Run()
	if code == 0 && !fuzzing() {
		if leaked := wait(base, markers, Grace); len(leaked) > 0 {
			fmt.Fprintf(os.Stderr, "goroutine leak: %d goroutines still running after the tests\n\n%s\n",
				len(leaked), strings.Join(leaked, "\n\n"))
			code = 1
		}
	}
	return code
}

// wait polls the goroutine stacks until none leaks or grace has passed, and returns the
// stacks of the leaked ones.
func wait(base int, markers []string, grace time.Duration) []string {
	deadline := time.Now().Add(grace)
	for {
		leaked := leakedStacks(base, markers)
		if len(leaked) == 0 || time.Now().After(deadline) {
			return leaked
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// leakedStacks returns the stacks of goroutines that count as leaked: those naming a marker,
// or, with no markers, every goroutine but this one once more are alive than at the start.
func leakedStacks(base int, markers []string) []string {
	if len(markers) == 0 && runtime.NumGoroutine() <= base {
		return nil
	}
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var leaked []string
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "leakcheck.leakedStacks") || strings.Contains(g, "testing.(*M).Run") {
			continue // this goroutine, or the test binary's main goroutine
		}
		if len(markers) == 0 || containsAny(g, markers) {
			leaked = append(leaked, g)
		}
	}
	return leaked
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// fuzzing reports whether the test binary runs as a fuzzing coordinator or worker.
func fuzzing() bool {
	for _, name := range []string{"test.fuzz", "test.fuzzworker"} {
		if f := flag.Lookup(name); f != nil {
			if v := f.Value.String(); v != "" && v != "false" {
				return true
			}
		}
	}
	return false
}
