package envoy

import "syscall"

// procAttr makes the kernel kill Envoy if the process that started it dies (a test binary that
// panics on its timeout, say), so no Envoy outlives its owner.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
