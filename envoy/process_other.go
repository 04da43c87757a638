//go:build !linux

package envoy

import "syscall"

// procAttr has no parent-death signal outside Linux; Stop must be called.
func procAttr() *syscall.SysProcAttr { return nil }
