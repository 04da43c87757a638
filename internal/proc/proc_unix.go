//go:build unix && !linux

package proc

import "syscall"

// The signals behind Pause and Resume.
const (
	sigStop = syscall.SIGSTOP
	sigCont = syscall.SIGCONT
)

// sysProcAttr gives the child its own process group, so a terminal's Ctrl-C reaches only the
// owner. There is no parent-death signal here: the owner must call Stop.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
