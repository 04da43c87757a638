package main

import (
	"context"
	"time"
)

// timerSamples is how many timers timerOvershoot waits on (about a second at 10 ms).
const timerSamples = 100

// timerOvershoot is the mean lateness of a Go timer of duration d on this machine. vllm-sim
// paces its steps with such timers, and its virtual clock catches up with the wall clock after
// each one, so this lateness is added to every step (Linux: the runtime's epoll_wait timeout
// has millisecond resolution).
func timerOvershoot(ctx context.Context, d time.Duration, n int) time.Duration {
	var late time.Duration
	done := 0
	for range n {
		t := time.NewTimer(d)
		start := time.Now()
		select {
		case <-ctx.Done():
			t.Stop()
			return mean(late, done)
		case <-t.C:
		}
		late += time.Since(start) - d
		done++
	}
	return mean(late, done)
}

func mean(sum time.Duration, n int) time.Duration {
	if n == 0 {
		return 0
	}
	return sum / time.Duration(n)
}
