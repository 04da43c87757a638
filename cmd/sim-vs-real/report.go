package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/condisagg/condisagg/workload"
)

// row is one run of one layout (real or simulated): latencies in milliseconds.
type row struct {
	Requests, Completed, Failed int
	TTFT, TPOT                  quant
	Goodput, Attainment         float64
	Routes                      map[string]int
	PrefixHitRate               float64
	Preemptions                 uint64 `json:",omitempty"` // simulated runs only
	Errors                      []string
}

type quant struct{ P50, P90, P99 float64 }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func rowFromSummary(s workload.Summary, preemptions uint64) row {
	return row{Requests: s.Requests, Completed: s.Completed, Failed: s.Failed,
		TTFT:    quant{ms(s.TTFT.P50), ms(s.TTFT.P90), ms(s.TTFT.P99)},
		TPOT:    quant{ms(s.TPOT.P50), ms(s.TPOT.P90), ms(s.TPOT.P99)},
		Goodput: s.Goodput, Attainment: s.Attainment, Routes: s.Routes, PrefixHitRate: s.PrefixHitRate, Preemptions: preemptions}
}

// rowFromJSON reads loadgen's -o json Summary (Dist fields in milliseconds).
func rowFromJSON(b json.RawMessage) (row, error) {
	var s struct {
		Requests, Completed, Failed int
		TTFT, TPOT                  quant
		Goodput, Attainment         float64
		Routes                      map[string]int
		PrefixHitRate               float64
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return row{}, fmt.Errorf("loadgen summary: %w", err)
	}
	return row{Requests: s.Requests, Completed: s.Completed, Failed: s.Failed, TTFT: s.TTFT, TPOT: s.TPOT,
		Goodput: s.Goodput, Attainment: s.Attainment, Routes: s.Routes, PrefixHitRate: s.PrefixHitRate}, nil
}

func (r row) short() string {
	return fmt.Sprintf("TTFT %.0f/%.0f/%.0f ms TPOT %.1f/%.1f/%.1f ms goodput %.3f/s attain %.2f done %d/%d routes %v",
		r.TTFT.P50, r.TTFT.P90, r.TTFT.P99, r.TPOT.P50, r.TPOT.P90, r.TPOT.P99, r.Goodput, r.Attainment, r.Completed, r.Requests, r.Routes)
}

// spread is the mean of xs and its range.
type spread struct{ Mean, Min, Max float64 }

func spreadOf(xs []float64) spread {
	s := spread{Min: math.Inf(1), Max: math.Inf(-1)}
	for _, x := range xs {
		s.Mean += x / float64(len(xs))
		s.Min, s.Max = min(s.Min, x), max(s.Max, x)
	}
	return s
}

func (s spread) String(prec int) string {
	return fmt.Sprintf("%.*f (%.*f–%.*f)", prec, s.Mean, prec, s.Min, prec, s.Max)
}

// metric is one column of the comparison.
type metric struct {
	name   string
	get    func(row) float64
	target float64 // largest |sim/real − 1| allowed; 0: reported, no target
	prec   int
}

var metrics = []metric{
	{"TTFT p50 ms", func(r row) float64 { return r.TTFT.P50 }, 0.20, 0},
	{"TTFT p90 ms", func(r row) float64 { return r.TTFT.P90 }, 0.30, 0},
	{"TTFT p99 ms", func(r row) float64 { return r.TTFT.P99 }, 0, 0},
	{"TPOT p50 ms", func(r row) float64 { return r.TPOT.P50 }, 0.20, 1},
	{"TPOT p90 ms", func(r row) float64 { return r.TPOT.P90 }, 0.30, 1},
	{"TPOT p99 ms", func(r row) float64 { return r.TPOT.P99 }, 0, 1},
	{"goodput req/s", func(r row) float64 { return r.Goodput }, 0, 3},
}

// report prints the comparison (a markdown table per layout, the ranking) and says whether
// every target holds.
func report(w io.Writer, c *config, res *results) bool {
	ok := true
	fmt.Fprintf(w, "\n## sim vs real (%d requests, input ×%g, output ×%g, time ×%g, SLO %s, %d repeats)\n\n",
		c.requests, c.inScale, c.outScale, c.timeScale, c.sloText, c.repeats)
	fmt.Fprintf(w, "sim: the step model with each engine's request handling (%.1f ms per leg, the calibration's request_overhead_ms); bare: the step model alone\n\n", res.RequestOverheadMS)
	fmt.Fprintln(w, "| layout | metric | real mean (min–max) | sim | sim/real | target | bare | bare/real |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	realGood, simGood := map[string]float64{}, map[string]float64{}
	for _, l := range c.layouts {
		runs, s := res.Real[l], res.Sim[l]
		if len(runs) == 0 {
			continue
		}
		for _, m := range metrics {
			xs := make([]float64, len(runs))
			for i, r := range runs {
				xs[i] = m.get(r)
			}
			sp := spreadOf(xs)
			sv := m.get(s)
			ratio := sv / sp.Mean
			verdict := ""
			if m.target > 0 {
				if math.Abs(ratio-1) <= m.target {
					verdict = fmt.Sprintf("ok (±%.0f%%)", 100*m.target)
				} else {
					verdict = fmt.Sprintf("MISS (±%.0f%%)", 100*m.target)
					ok = false
				}
			}
			bv := m.get(res.SimBare[l])
			fmt.Fprintf(w, "| %s | %s | %s | %.*f | %.2f | %s | %.*f | %.2f |\n", l, m.name, sp.String(m.prec), m.prec, sv, ratio, verdict, m.prec, bv, bv/sp.Mean)
		}
		realGood[l], simGood[l] = spreadOf(collect(runs, func(r row) float64 { return r.Goodput })).Mean, s.Goodput
	}
	rr, sr := rank(realGood), rank(simGood)
	same := agree(realGood, simGood)
	fmt.Fprintf(w, "\nranking by goodput: real %s; sim %s: %s\n", strings.Join(rr, " > "), strings.Join(sr, " > "), map[bool]string{true: "same", false: "DIFFERENT"}[same])
	for _, l := range c.layouts {
		if runs := res.Real[l]; len(runs) > 0 {
			fmt.Fprintf(w, "routes %-14s real %v sim %v; prefix hit real %.3f sim %.3f; sim preemptions %d\n", l, runs[0].Routes, res.Sim[l].Routes,
				runs[0].PrefixHitRate, res.Sim[l].PrefixHitRate, res.Sim[l].Preemptions)
		}
	}
	return ok && same
}

func collect(runs []row, f func(row) float64) []float64 {
	out := make([]float64, len(runs))
	for i, r := range runs {
		out[i] = f(r)
	}
	return out
}

// agree reports whether the simulator orders every pair of layouts as the engines do. A tie in
// the simulator (two layouts routing alike, as slo and aggregated can) agrees with either
// order; a layout the simulator ranks strictly above one the engines rank strictly above it
// does not.
func agree(real, sim map[string]float64) bool {
	for a := range real {
		for b := range real {
			if real[a] > real[b] && sim[a] < sim[b] {
				return false
			}
		}
	}
	return true
}

// rank orders the layouts by goodput, best first (ties by name).
func rank(g map[string]float64) []string {
	var ls []string
	for l := range g {
		ls = append(ls, l)
	}
	slices.SortFunc(ls, func(a, b string) int {
		if g[a] != g[b] {
			if g[a] > g[b] {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	return ls
}
