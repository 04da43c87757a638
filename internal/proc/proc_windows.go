package proc

import "syscall"

// Windows has no job-control signals; os.Process.Signal refuses every signal but Kill, so
// Pause and Resume fail and Stop kills at once. The values only need to differ from Kill.
const (
	sigStop = syscall.Signal(0x13)
	sigCont = syscall.Signal(0x12)
)

// sysProcAttr has nothing to add: no process groups to set and no parent-death signal, so
// the owner must call Stop.
func sysProcAttr() *syscall.SysProcAttr { return nil }
