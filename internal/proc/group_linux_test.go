package proc

import (
	"context"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// The scripts below put a child of their own in the background (sleep, its output away from
// the pipe so that the pipe closes with sh) and log its pid as "msg=ready child=PID".
const (
	bgChild = `sleep 60 >/dev/null 2>&1 & echo "msg=ready child=$!"; `
	// A child that ignores SIGTERM (sleep inherits the ignored signal) and so outlives sh.
	bgChildIgnoresTerm = `(trap "" TERM; exec sleep 60) >/dev/null 2>&1 & echo "msg=ready child=$!"; `
)

// startWithChild runs script under sh with cfg and returns it with its background child's
// pid. The child is killed when the test ends, whatever the test did to the group.
func startWithChild(t *testing.T, cfg Config, script string) (*Proc, int) {
	t.Helper()
	p := startSh(t, cfg, script)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	attrs, err := p.WaitLog(ctx, "ready")
	if err != nil {
		t.Fatal(err)
	}
	child, err := strconv.Atoi(attrs["child"])
	if err != nil {
		t.Fatalf("script logged child=%q; want a pid", attrs["child"])
	}
	t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL) })
	return p, child
}

func dead(s byte) bool  { return s == 0 || s == 'Z' || s == 'X' } // gone, or a zombie nobody reaps yet
func alive(s byte) bool { return s == 'S' || s == 'R' }

// TestStopWithGroupEndsDescendants: with Group, SIGTERM reaches the child sh forked; without
// it (envoy, e2e) only sh is signalled and its child lives on.
func TestStopWithGroupEndsDescendants(t *testing.T) {
	for _, c := range []struct {
		group   bool
		want    func(byte) bool
		childIs string
	}{
		{true, dead, "dead"},
		{false, alive, "alive (only sh was signalled)"},
	} {
		t.Run("group="+strconv.FormatBool(c.group), func(t *testing.T) {
			t.Parallel()
			p, child := startWithChild(t, Config{LogLines: 16, Group: c.group, Grace: time.Minute}, bgChild+"wait")
			if err := p.Stop(); err != nil {
				t.Fatalf("Stop = %v; want nil (sh dies of SIGTERM)", err)
			}
			if c.group {
				awaitState(t, child, c.childIs, c.want)
			} else if s := procState(child); !c.want(s) {
				t.Errorf("child %d: state %q; want it %s", child, s, c.childIs)
			}
		})
	}
}

// TestStopWithGroupKillsWhatOutlivesTheProcess: sh exits on SIGTERM, its child ignores it; the
// process's exit ends the group, so Stop kills the child rather than leaving it running.
func TestStopWithGroupKillsWhatOutlivesTheProcess(t *testing.T) {
	p, child := startWithChild(t, Config{LogLines: 16, Group: true, Grace: time.Minute}, bgChildIgnoresTerm+"wait")
	if err := p.Stop(); err != nil {
		t.Fatalf("Stop = %v; want nil: sh exited on SIGTERM, within the grace", err)
	}
	awaitState(t, child, "dead", dead)
}

// TestStopWithGroupAfterExitKillsLeftovers: sh has exited by itself and left its child
// running; a Stop then still ends the group.
func TestStopWithGroupAfterExitKillsLeftovers(t *testing.T) {
	p, child := startWithChild(t, Config{LogLines: 16, Group: true}, bgChild+"exit 0")
	exited(t, p)
	if s := procState(child); !alive(s) {
		t.Fatalf("child %d: state %q before Stop; want it alive", child, s)
	}
	if err := p.Stop(); err != nil {
		t.Fatalf("Stop = %v; want sh's exit status 0", err)
	}
	awaitState(t, child, "dead", dead)
}

func TestKillWithGroupEndsDescendants(t *testing.T) {
	p, child := startWithChild(t, Config{LogLines: 16, Group: true}, bgChildIgnoresTerm+"wait")
	p.Kill()
	awaitState(t, child, "dead", dead)
}

func TestPauseWithGroupStopsDescendants(t *testing.T) {
	p, child := startWithChild(t, Config{LogLines: 16, Group: true}, bgChild+"wait")
	if err := p.Pause(); err != nil {
		t.Fatal(err)
	}
	awaitState(t, child, "stopped (T)", func(s byte) bool { return s == 'T' })
	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
	awaitState(t, child, "running or sleeping", alive)
}
