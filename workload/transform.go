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

// ScaleLengths returns a copy of reqs whose prompts are in and whose outputs are out times as
// long (0.0625 makes a Mooncake 512-token hash block 32 tokens), for replaying a trace on an
// engine far smaller than the one it was recorded on. Each segment covers stream positions
// [floor(Start·f), ceil((Start+Len)·f)), so a segment that two requests share stays shared (the
// prefix structure is kept block for block), adjoining segments of one stream still adjoin, and
// no segment becomes empty. Arrivals are unchanged; segments are new, never shared with reqs.
func ScaleLengths(reqs []Request, in, out float64) ([]Request, error) {
	for _, f := range []struct {
		name string
		v    float64
	}{{"input", in}, {"output", out}} {
		if !(f.v > 0) || f.v > 1 {
			return nil, fmt.Errorf("workload: %s length factor %v must be in (0, 1]", f.name, f.v)
		}
	}
	res := make([]Request, len(reqs))
	for i, r := range reqs {
		r.Prompt = scaleSegments(r.Prompt, in)
		r.Output = scaleSegments(r.Output, out)
		r.InputTokens, r.OutputTokens = segmentsLen(r.Prompt), segmentsLen(r.Output)
		res[i] = r
	}
	return res, nil
}

func scaleSegments(segs []Segment, f float64) []Segment {
	if segs == nil {
		return nil
	}
	res := make([]Segment, len(segs))
	for i, s := range segs {
		lo := uint32(math.Floor(float64(s.Start) * f))
		hi := uint32(math.Ceil(float64(s.Start+s.Len) * f))
		if hi <= lo {
			hi = lo + 1
		}
		res[i] = Segment{ID: s.ID, Start: lo, Len: hi - lo}
	}
	return res
}
