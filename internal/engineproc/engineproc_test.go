package engineproc

import (
	"os/exec"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

func TestParseCPUList(t *testing.T) {
	for in, want := range map[string][]int{"0": {0}, "0,2": {0, 2}, "1-3": {1, 2, 3}, " 4 , 6-7": {4, 6, 7}} {
		got, err := parseCPUList(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("parseCPUList(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "a", "3-1", "-1", "1-", "2048"} {
		if _, err := parseCPUList(bad); err == nil {
			t.Errorf("parseCPUList(%q) accepted", bad)
		}
	}
}

// PinTree reaches every thread of a process and of its child, as the engine's EngineCore and
// worker are reached through the shell that started them.
func TestPinTree(t *testing.T) {
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		t.Fatal(err)
	}
	target := -1
	for c := 1023; c >= 0; c-- {
		if all.IsSet(c) {
			target = c
			break
		}
	}
	// A shell whose child sleeps: two processes, the second a descendant.
	cmd := exec.Command("sh", "-c", "sleep 30 & wait")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var pids []int
	for range 100 {
		if pids = treePids(cmd.Process.Pid); len(pids) >= 2 {
			break
		}
		exec.Command("sleep", "0.02").Run()
	}
	if len(pids) < 2 {
		t.Fatalf("tree of %d has %v, want the shell and its sleep", cmd.Process.Pid, pids)
	}
	if err := PinTree(cmd.Process.Pid, []int{target}); err != nil {
		t.Fatal(err)
	}
	for _, p := range pids {
		var got unix.CPUSet
		if err := unix.SchedGetaffinity(p, &got); err != nil {
			t.Fatal(err)
		}
		if got.Count() != 1 || !got.IsSet(target) {
			t.Fatalf("process %d: affinity has %d cores, want only core %d", p, got.Count(), target)
		}
	}
}
