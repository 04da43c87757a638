//go:build !linux

package e2e

import "syscall"

// procAttr puts a child in its own process group.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
