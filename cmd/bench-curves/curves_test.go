package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const benchOut = `goos: linux
pkg: github.com/condisagg/condisagg/extproc
BenchmarkDecisionLatency/tokens=8192/prompt=unique-2         	     100	    363329 ns/op	     10000 decisions	         0.6 p50-ms	         1.5 p99-ms	      8017 tokens/req	  165566 B/op	     590 allocs/op
BenchmarkDecisionLatency/tokens=8192/prompt=unique-2         	     100	    363329 ns/op	     10000 decisions	         0.7 p50-ms	         9.5 p99-ms	      8017 tokens/req	  165566 B/op	     590 allocs/op
BenchmarkDecisionLatency/tokens=8192/prompt=unique-2         	     100	    363329 ns/op	     10000 decisions	         0.5 p50-ms	         1.2 p99-ms	      8017 tokens/req	  165566 B/op	     590 allocs/op
BenchmarkDecisionLatency/tokens=8192/prompt=next_turn_warm_cache-2 	 100	    681976 ns/op	     10000 decisions	         0.1 p50-ms	         0.3 p99-ms	      8041 tokens/req	  209935 B/op	    1284 allocs/op
BenchmarkDecisionLatency/tokens=1024/prompt=unique-2         	     100	    363329 ns/op	     10000 decisions	         0.1 p50-ms	         0.2 p99-ms	      1017 tokens/req	  165566 B/op	     590 allocs/op
BenchmarkDecisionScale/workers=8/tokens=8192/prompt=unique-2 	     1	    363329 ns/op	     10000 decisions	         0.4 p50-ms	         1.0 p99-ms	      8017 tokens/req	  165566 B/op	     590 allocs/op
BenchmarkDecisionScale/workers=64/tokens=131072/prompt=unique-2 	     1	    363329 ns/op	       600 decisions	         20 p50-ms	         30 p99-ms	      8017 tokens/req	  165566 B/op	     590 allocs/op
PASS
`

const peersOut = `{"case":"8k/w8/o50","impl":"condisagg","lookup_ns":250}
{"case":"8k/w64/o50","impl":"condisagg","lookup_ns":790}
{"case":"8k/w64/o50","impl":"dynamo-crtc","lookup_ns":760}
{"case":"8k/w8/o50","impl":"dynamo-crtc","lookup_ns":380}
{"case":"128k/w64/o50","impl":"condisagg","lookup_ns":900}
{"case":"8k/w64/o95","impl":"condisagg","lookup_ns":123456}
`

func TestParseDecisions(t *testing.T) {
	ds, err := parseDecisions(strings.NewReader(benchOut))
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 5 {
		t.Fatalf("got %d points, want 5 (three runs of one point are one): %+v", len(ds), ds)
	}
	if d := ds[0]; d.workers != 64 || d.tokens != 8192 || d.warm || d.p99 != 1.5 || d.p50 != 0.6 || d.samples != 10000 {
		t.Errorf("first point = %+v, want 64 workers, 8192 tokens, unique, the median run (p99 1.5, p50 0.6)", d)
	}
	if !ds[1].warm || ds[3].workers != 8 || ds[4].tokens != 131072 || ds[4].samples != 600 {
		t.Errorf("points = %+v", ds)
	}
	if _, err := parseDecisions(strings.NewReader("BenchmarkDecisionScale/workers=x/tokens=8192/prompt=unique-2 1 2 p99-ms\n")); err == nil {
		t.Error("a non-numeric workers= was accepted")
	}
}

func TestParseLookups(t *testing.T) {
	ls, err := parseLookups(strings.NewReader(peersOut))
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != 6 || ls[4].tokens != 131072 || ls[2].impl != "dynamo-crtc" || ls[2].ns != 760 {
		t.Fatalf("lookups = %+v", ls)
	}
	if _, err := parseLookups(strings.NewReader(`{"impl":"condisagg","lookup_ns":1}` + "\n")); err == nil {
		t.Error("a line without its case was accepted")
	}
}

// TestCurvesDrawTheAxes checks which points land on which chart: the workers axis takes the
// 8k-token points, the tokens axis the 64-worker ones, and the lookup charts only the 50 %
// overlap cases.
func TestCurvesDrawTheAxes(t *testing.T) {
	ds, _ := parseDecisions(strings.NewReader(benchOut))
	ls, _ := parseLookups(strings.NewReader(peersOut))
	cs := curves(ds, ls)
	byFile := map[string]chart{}
	for _, c := range cs {
		byFile[c.file] = c
	}
	line := func(file, name string) series {
		for _, s := range byFile[file].lines {
			if s.name == name {
				return s
			}
		}
		t.Fatalf("%s has no line %q", file, name)
		return series{}
	}
	if s := line("decision-workers.svg", "p99, unique prompt"); len(s.x) != 2 || s.x[0] != 8 || s.x[1] != 64 || s.y[1] != 1.5 {
		t.Errorf("decision p99 against workers = %v %v, want x 8, 64 and y[1] 1.5", s.x, s.y)
	}
	if s := line("decision-tokens.svg", "p99, unique prompt"); len(s.x) != 3 || s.x[2] != 131072 || s.y[2] != 30 {
		t.Errorf("decision p99 against tokens = %v %v", s.x, s.y)
	}
	if s := line("lookup-workers.svg", "condisagg"); len(s.x) != 2 || s.y[1] != 0.79 {
		t.Errorf("lookup against workers = %v %v, want the o50 points only (µs)", s.x, s.y)
	}
	if s := line("lookup-tokens.svg", "dynamo-crtc"); len(s.x) != 1 || !s.dashed {
		t.Errorf("peer lookup against tokens = %+v, want one dashed point", s)
	}
	dir := t.TempDir()
	for _, c := range cs {
		svg, err := c.svg()
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, c.file), svg, 0o644); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(svg), "<svg") || !strings.Contains(string(svg), c.title) {
			t.Errorf("%s: not an SVG with its title", c.file)
		}
	}
	if !strings.Contains(string(mustSVG(t, byFile["decision-tokens.svg"])), ">128k<") {
		t.Error("tokens axis not labelled in k")
	}
}

func mustSVG(t *testing.T, c chart) []byte {
	t.Helper()
	b, err := c.svg()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestTicks125(t *testing.T) {
	var got []string
	for _, tk := range (ticks125{}).Ticks(0.3, 12) {
		got = append(got, tk.Label)
	}
	if strings.Join(got, " ") != "0.5 1 2 5 10" {
		t.Fatalf("ticks in [0.3, 12] = %v, want 0.5 1 2 5 10", got)
	}
}
