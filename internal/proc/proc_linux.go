package proc

import "syscall"

// The signals behind Pause and Resume.
const (
	sigStop = syscall.SIGSTOP
	sigCont = syscall.SIGCONT
)

// sysProcAttr gives the child its own process group (a terminal's Ctrl-C reaches only the
// owner, which stops its children in order) and has the kernel kill it when the thread that
// started it dies: a test binary that panics on its timeout runs no cleanup, yet leaves no
// child behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
