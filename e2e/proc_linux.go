package e2e

import "syscall"

// procAttr puts a child in its own process group and kills it if the test process dies
// first (a timeout panic skips every cleanup), so no simulator or router outlives a run.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
