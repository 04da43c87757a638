package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// decisionFleet is the fleet of BenchmarkDecisionLatency, whose names do not carry it.
const decisionFleet = 64

// decision is one decision-latency benchmark result.
type decision struct {
	workers, tokens int
	warm            bool
	p50, p99        float64 // milliseconds
	samples         int
}

// parseDecisions reads the DecisionLatency and DecisionScale lines of go test -bench output,
// e.g. "BenchmarkDecisionScale/workers=8/tokens=8192/prompt=unique-2  1  10000 decisions
// 0.61 p50-ms  1.9 p99-ms ...". A point measured more than once (-count) keeps the median of
// its p99s, with that run's p50.
func parseDecisions(r io.Reader) ([]decision, error) {
	runs := map[[3]int][]decision{}
	var order [][3]int
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !(strings.HasPrefix(f[0], "BenchmarkDecisionLatency/") || strings.HasPrefix(f[0], "BenchmarkDecisionScale/")) {
			continue
		}
		name := f[0]
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			name = name[:i]
		}
		d := decision{workers: decisionFleet}
		for _, part := range strings.Split(name, "/")[1:] {
			k, v, _ := strings.Cut(part, "=")
			var err error
			switch k {
			case "workers":
				d.workers, err = strconv.Atoi(v)
			case "tokens":
				d.tokens, err = strconv.Atoi(v)
			case "prompt":
				d.warm = v != "unique"
			}
			if err != nil {
				return nil, fmt.Errorf("bench-curves: %s: %s: %w", f[0], k, err)
			}
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("bench-curves: %s: value %q: %w", f[0], f[i], err)
			}
			switch f[i+1] {
			case "p50-ms":
				d.p50 = v
			case "p99-ms":
				d.p99 = v
			case "decisions":
				d.samples = int(v)
			}
		}
		if d.tokens == 0 || d.p99 == 0 {
			return nil, fmt.Errorf("bench-curves: %s: no tokens= in the name or no p99-ms metric", f[0])
		}
		key := [3]int{d.workers, d.tokens, boolInt(d.warm)}
		if runs[key] == nil {
			order = append(order, key)
		}
		runs[key] = append(runs[key], d)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("bench-curves: read decisions: %w", err)
	}
	out := make([]decision, 0, len(order))
	for _, k := range order {
		out = append(out, medianP99(runs[k]))
	}
	return out, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// medianP99 is the run whose p99 is the median of rs (the lower middle one for an even count).
func medianP99(rs []decision) decision {
	s := slices.Clone(rs)
	slices.SortStableFunc(s, func(a, b decision) int { return cmp.Compare(a.p99, b.p99) })
	return s[(len(s)-1)/2]
}

// lookup is one harness run of bench-peers: its index's CPU time per lookup on a case.
type lookup struct {
	impl            string
	workers, tokens int
	overlap         int
	ns              float64
}

// parseLookups reads bench-peers -out lines: {"case":"8k/w64/o50","impl":"condisagg",
// "lookup_ns":..., ...}. Lines without a case (written before the field existed) are an error.
// A (case, impl) run more than once keeps the median.
func parseLookups(r io.Reader) ([]lookup, error) {
	type key struct {
		impl    string
		w, t, o int
	}
	runs := map[key][]float64{}
	var order []key
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var j struct {
			Case     string  `json:"case"`
			Impl     string  `json:"impl"`
			LookupNS float64 `json:"lookup_ns"`
		}
		if err := json.Unmarshal([]byte(line), &j); err != nil {
			return nil, fmt.Errorf("bench-curves: lookups line %d: %w", n, err)
		}
		var k key
		var kt int
		if _, err := fmt.Sscanf(j.Case, "%dk/w%d/o%d", &kt, &k.w, &k.o); err != nil || j.Impl == "" {
			return nil, fmt.Errorf("bench-curves: lookups line %d: case %q impl %q: want a bench-peers -out line (case like 8k/w64/o50)", n, j.Case, j.Impl)
		}
		k.impl, k.t = j.Impl, kt*1024
		if runs[k] == nil {
			order = append(order, k)
		}
		runs[k] = append(runs[k], j.LookupNS)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("bench-curves: read lookups: %w", err)
	}
	out := make([]lookup, 0, len(order))
	for _, k := range order {
		s := slices.Clone(runs[k])
		slices.Sort(s)
		out = append(out, lookup{impl: k.impl, workers: k.w, tokens: k.t, overlap: k.o, ns: s[(len(s)-1)/2]})
	}
	return out, nil
}
