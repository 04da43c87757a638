package workload

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Number is a sample type Dist summarises: counts, token lengths, ratios, durations.
type Number interface{ ~int | ~int64 | ~float64 }

// Dist summarises a sample: count, mean, min, max and the percentiles reports use. For
// time.Duration samples it marshals to JSON in milliseconds.
type Dist[T Number] struct {
	N                                       int
	Mean, Min, P10, P25, P50, P75, P90, P95 T
	P99, Max                                T
}

// NewDist summarises xs (xs is not modified).
func NewDist[T Number](xs []T) Dist[T] {
	if len(xs) == 0 {
		return Dist[T]{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	var sum float64
	for _, x := range s {
		sum += float64(x)
	}
	q := func(p float64) T { return QuantileSorted(s, p) }
	return Dist[T]{
		N: len(s), Mean: T(sum / float64(len(s))), Min: s[0], Max: s[len(s)-1],
		P10: q(0.10), P25: q(0.25), P50: q(0.50), P75: q(0.75), P90: q(0.90), P95: q(0.95), P99: q(0.99),
	}
}

// QuantileSorted is the q-quantile (0 <= q <= 1) of an ascending sample, interpolated linearly
// between closest ranks (Hyndman–Fan type 7, numpy's default). It is 0 for an empty sample.
func QuantileSorted[T Number](sorted []T, q float64) T {
	if len(sorted) == 0 {
		return 0
	}
	q = min(max(q, 0), 1)
	pos := q * float64(len(sorted)-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, len(sorted)-1)
	frac := pos - float64(lo)
	return T(float64(sorted[lo]) + frac*(float64(sorted[hi])-float64(sorted[lo])))
}

// MarshalJSON writes the fields as numbers, durations in milliseconds.
func (d Dist[T]) MarshalJSON() ([]byte, error) {
	conv := func(v T) float64 {
		if _, ok := any(v).(time.Duration); ok {
			return float64(v) / float64(time.Millisecond)
		}
		return float64(v)
	}
	return json.Marshal(struct {
		N                                                 int
		Mean, Min, P10, P25, P50, P75, P90, P95, P99, Max float64
	}{d.N, conv(d.Mean), conv(d.Min), conv(d.P10), conv(d.P25), conv(d.P50), conv(d.P75), conv(d.P90), conv(d.P95), conv(d.P99), conv(d.Max)})
}

// SLO is a latency objective (perf-model.md §6); a zero field sets no limit.
type SLO struct {
	TTFT time.Duration
	TPOT time.Duration
}

// ParseSLO parses "ttft=2s,tpot=100ms" (either key may be left out; durations in Go syntax).
func ParseSLO(s string) (SLO, error) {
	var slo SLO
	var errs []error
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		d, err := time.ParseDuration(strings.TrimSpace(v))
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("slo: %q must be key=duration", part))
		case err != nil || d < 0:
			errs = append(errs, fmt.Errorf("slo: %s=%q must be a non-negative duration such as 100ms", k, v))
		case strings.TrimSpace(k) == "ttft":
			slo.TTFT = d
		case strings.TrimSpace(k) == "tpot":
			slo.TPOT = d
		default:
			errs = append(errs, fmt.Errorf("slo: key %q must be ttft or tpot", k))
		}
	}
	return slo, errors.Join(errs...)
}

func (s SLO) String() string { return "ttft=" + s.TTFT.String() + ",tpot=" + s.TPOT.String() }

// Met reports whether a completed r meets both objectives. A request with fewer than two
// output tokens has no TPOT and meets that objective.
func (s SLO) Met(r *Result) bool {
	if !r.Completed() {
		return false
	}
	if s.TTFT > 0 && r.TTFT > s.TTFT {
		return false
	}
	tpot, ok := r.TPOT()
	return s.TPOT <= 0 || !ok || tpot <= s.TPOT
}

// Result is what happened to one request, from a live run or a simulation. Times are offsets
// from the start of the run; Arrival is the send time (the trace time in a simulator).
type Result struct {
	Index        int
	Arrival      time.Duration
	TTFT         time.Duration // arrival -> first output token
	E2E          time.Duration // arrival -> last output token
	OutputTokens int           // tokens received
	InputTokens  int
	CachedTokens int // prompt tokens served from a prefix cache; -1 when unknown
	// Gaps are the intervals between consecutive token arrivals (pooled for the token-gap
	// diagnostic); optional.
	Gaps   []time.Duration
	Route  string // "decode" (bypass) or "prefill", from x-condisagg-decision; "" if unknown
	Reason string
	Err    string // non-empty when the request failed
}

// Completed reports whether the request finished without error and produced a token.
func (r *Result) Completed() bool { return r.Err == "" && r.OutputTokens > 0 }

// TPOT is (t_last − t_first)/(n_out − 1), defined for completed requests with n_out >= 2.
func (r *Result) TPOT() (time.Duration, bool) {
	if !r.Completed() || r.OutputTokens < 2 {
		return 0, false
	}
	return (r.E2E - r.TTFT) / time.Duration(r.OutputTokens-1), true
}

// SteadyState excludes warm-up and drain from goodput: only requests arriving in
// [first arrival + Warmup, last arrival − Drain] count, over that window's length. With both
// zero every request counts, over first arrival -> last completion (vLLM's benchmark duration).
type SteadyState struct {
	Warmup, Drain time.Duration
}

// Summary is one row of the report: latency distributions, goodput and routing counts.
type Summary struct {
	Name        string
	Requests    int
	Completed   int
	Failed      int
	TTFT        Dist[time.Duration]
	TPOT        Dist[time.Duration]
	E2E         Dist[time.Duration]
	Gap         Dist[time.Duration] // pooled token gaps, diagnostic
	Attainment  float64             // share of completed requests meeting the SLO
	Goodput     float64             // SLO-meeting requests per second in the steady-state window
	Window      time.Duration       // goodput denominator
	OutputTokPS float64             // output tokens per second over the window
	SLO         SLO
	// PrefixHitRate is cached / input tokens over completed requests that report
	// CachedTokens (-1 when none does).
	PrefixHitRate float64
	Routes        map[string]int // route -> requests ("" = no decision header)
	Reasons       map[string]int
	BypassRate    float64 // decode-route share of requests with a known route; -1 if none
}

// Summarize computes the Summary of results under slo.
func Summarize(name string, results []Result, slo SLO, ss SteadyState) Summary {
	s := Summary{Name: name, Requests: len(results), SLO: slo, Routes: map[string]int{}, Reasons: map[string]int{}}
	var ttft, tpot, e2e, gaps []time.Duration
	met, cached, input := 0, 0, 0
	for i := range results {
		r := &results[i]
		s.Routes[r.Route]++
		if r.Reason != "" {
			s.Reasons[r.Reason]++
		}
		if !r.Completed() {
			s.Failed++
			continue
		}
		s.Completed++
		ttft, e2e = append(ttft, r.TTFT), append(e2e, r.E2E)
		if v, ok := r.TPOT(); ok {
			tpot = append(tpot, v)
		}
		gaps = append(gaps, r.Gaps...)
		if r.CachedTokens >= 0 {
			cached, input = cached+r.CachedTokens, input+r.InputTokens
		}
		if slo.Met(r) {
			met++
		}
	}
	s.TTFT, s.TPOT, s.E2E, s.Gap = NewDist(ttft), NewDist(tpot), NewDist(e2e), NewDist(gaps)
	if s.Completed > 0 {
		s.Attainment = float64(met) / float64(s.Completed)
	}
	s.PrefixHitRate = -1
	if input > 0 {
		s.PrefixHitRate = float64(cached) / float64(input)
	}
	s.BypassRate = -1
	if known := len(results) - s.Routes[""]; known > 0 {
		s.BypassRate = float64(s.Routes["decode"]) / float64(known)
	}
	s.Goodput, s.OutputTokPS, s.Window = goodput(results, results, slo, ss)
	return s
}

// window is the steady-state window of results: [from, to], and whole when every request
// counts (no warm-up or drain given). to <= from means no usable window.
func (ss SteadyState) window(results []Result) (from, to time.Duration, whole bool) {
	if len(results) == 0 {
		return 0, 0, true
	}
	first := slices.MinFunc(results, func(a, b Result) int { return cmp.Compare(a.Arrival, b.Arrival) }).Arrival
	if ss.Warmup == 0 && ss.Drain == 0 {
		to = first
		for i := range results {
			if results[i].Completed() {
				to = max(to, results[i].Arrival+results[i].E2E)
			}
		}
		return first, to, true
	}
	last := slices.MaxFunc(results, func(a, b Result) int { return cmp.Compare(a.Arrival, b.Arrival) }).Arrival
	return first + ss.Warmup, last - ss.Drain, false
}

// goodput is SLO-meeting requests per second and output tokens per second among counted,
// over the window of all (counted is all or a subset of it, e.g. one ISL bucket).
func goodput(all, counted []Result, slo SLO, ss SteadyState) (good, tokPS float64, window time.Duration) {
	from, to, whole := ss.window(all)
	if to <= from {
		return 0, 0, 0
	}
	n, toks := 0, 0
	for i := range counted {
		r := &counted[i]
		if !whole && (r.Arrival < from || r.Arrival > to) {
			continue
		}
		if slo.Met(r) {
			n++
		}
		if r.Completed() {
			toks += r.OutputTokens
		}
	}
	sec := (to - from).Seconds()
	return float64(n) / sec, float64(toks) / sec, to - from
}

// ISLBucket is a prompt-length range [Min, Max) for per-bucket reports (perf-model.md §6).
type ISLBucket struct {
	Name     string
	Min, Max int
}

// ISLBuckets are the report buckets of perf-model.md §6: < 2k, 2–8k, 8–32k, > 32k tokens.
func ISLBuckets() []ISLBucket {
	return []ISLBucket{{"isl<2k", 0, 2048}, {"isl 2-8k", 2048, 8192}, {"isl 8-32k", 8192, 32768}, {"isl>32k", 32768, math.MaxInt}}
}

// SummarizeByISL is one Summary per non-empty bucket, named "name bucket". Goodput and
// output tok/s in each count that bucket's requests over the whole run's window.
func SummarizeByISL(name string, results []Result, slo SLO, ss SteadyState, buckets []ISLBucket) []Summary {
	var out []Summary
	for _, b := range buckets {
		var sub []Result
		for i := range results {
			if n := results[i].InputTokens; n >= b.Min && n < b.Max {
				sub = append(sub, results[i])
			}
		}
		if len(sub) == 0 {
			continue
		}
		s := Summarize(name+" "+b.Name, sub, slo, ss)
		s.Goodput, s.OutputTokPS, s.Window = goodput(results, sub, slo, ss)
		out = append(out, s)
	}
	return out
}
