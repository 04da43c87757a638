package proc

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// procState returns the state letter of pid from /proc ('S', 'T', 'Z', …), or 0 once the
// process is gone.
func procState(pid int) byte {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// "pid (comm) S …": comm may hold spaces and parentheses, the state follows the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return 0
	}
	return s[i+2]
}

// awaitState polls (the process is external) until ok accepts pid's state or 10s pass.
func awaitState(t *testing.T, pid int, what string, ok func(byte) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !ok(procState(pid)) {
		select {
		case <-ctx.Done():
			t.Fatalf("pid %d: state %q; want it %s", pid, procState(pid), what)
		case <-tick.C:
		}
	}
}

func TestPauseStopsAndResumeContinues(t *testing.T) {
	p, err := Start(Config{Path: "sleep", Args: []string{"60"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop() })
	pid := p.cmd.Process.Pid
	if err := p.Pause(); err != nil {
		t.Fatal(err)
	}
	awaitState(t, pid, "stopped (T)", func(s byte) bool { return s == 'T' })
	if !p.Paused() {
		t.Error("Paused = false after Pause")
	}
	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
	awaitState(t, pid, "running or sleeping", func(s byte) bool { return s == 'S' || s == 'R' })
	if p.Paused() {
		t.Error("Paused = true after Resume")
	}
}

// TestParentDeathKillsChild: a parent that exits without Stop (as a test binary panicking on
// its timeout does) takes its child with it.
func TestParentDeathKillsChild(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	parent := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	parent.Env = append(os.Environ(), helperEnv+"=1")
	out, err := parent.Output()
	if err != nil {
		t.Fatalf("helper parent: %v: %s", err, out)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("helper parent printed %q; want the child's pid", out)
	}
	// Gone, or a zombie nobody reaps (a container's init may not): either way it is dead.
	awaitState(t, pid, "dead", func(s byte) bool { return s == 0 || s == 'Z' || s == 'X' })
}
