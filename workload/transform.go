package workload

import (
	"fmt"
	"math"
	"time"
)

// Window keeps the leading slice of a workload, in trace time: at most MaxRequests requests
// (0: no limit) that arrive before Duration (0: no limit).
type Window struct {
	MaxRequests int
	Duration    time.Duration
}

func (w Window) admits(n int, arrival time.Duration) bool {
	if w.MaxRequests > 0 && n >= w.MaxRequests {
		return false
	}
	return w.Duration <= 0 || arrival < w.Duration
}

// Apply returns the leading requests w admits (a subslice of reqs). Requests must be in
// arrival order, as every reader and generator returns them.
func (w Window) Apply(reqs []Request) []Request {
	for i, r := range reqs {
		if !w.admits(i, r.Arrival) {
			return reqs[:i]
		}
	}
	return reqs
}

// ScaleRate returns a copy of reqs whose arrival rate is factor times the original: every
// Arrival and ThinkTime is divided by factor (2 doubles the load). Segments are shared.
func ScaleRate(reqs []Request, factor float64) ([]Request, error) {
	if !(factor > 0) || math.IsInf(factor, 0) {
		return nil, fmt.Errorf("workload: rate factor %v must be a positive finite number", factor)
	}
	out := make([]Request, len(reqs))
	for i, r := range reqs {
		r.Arrival = scaleDuration(r.Arrival, factor)
		r.ThinkTime = scaleDuration(r.ThinkTime, factor)
		out[i] = r
	}
	return out, nil
}

func scaleDuration(d time.Duration, factor float64) time.Duration {
	v := float64(d) / factor
	if v >= math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(v)
}
