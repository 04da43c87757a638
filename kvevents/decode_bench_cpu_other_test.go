//go:build !linux

package kvevents

import "time"

// threadCPU is unavailable off Linux; benchmarks then report wall-clock rates only.
func threadCPU() (time.Duration, bool) { return 0, false }
