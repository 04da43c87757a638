//go:build linux

package kvevents

import (
	"syscall"
	"time"
)

// rusageThread is RUSAGE_THREAD: the calling thread's CPU time.
const rusageThread = 1

// threadCPU returns the CPU time of the calling OS thread. Benchmarks lock their goroutine to
// one thread and report work per CPU second beside work per wall second, because the CPU time
// is not inflated when other processes share the cores.
func threadCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
