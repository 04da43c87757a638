package workload

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"
)

func TestQuantileSortedMatchesNumpy(t *testing.T) {
	xs := []float64{1, 2, 3, 4, 10}
	// numpy.quantile(xs, q) with the default linear method.
	for _, c := range []struct{ q, want float64 }{{0, 1}, {0.1, 1.4}, {0.5, 3}, {0.9, 7.6}, {0.99, 9.76}, {1, 10}} {
		if got := QuantileSorted(xs, c.q); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("q%.2f = %v, want %v", c.q, got, c.want)
		}
	}
	if QuantileSorted([]float64(nil), 0.5) != 0 {
		t.Error("empty sample must give 0")
	}
	d := NewDist([]time.Duration{4 * time.Millisecond, time.Millisecond, 3 * time.Millisecond, 2 * time.Millisecond})
	if d.N != 4 || d.Min != time.Millisecond || d.Max != 4*time.Millisecond || d.P50 != 2500*time.Microsecond || d.Mean != 2500*time.Microsecond {
		t.Fatalf("dist = %+v", d)
	}
	b, _ := json.Marshal(d)
	if !strings.Contains(string(b), `"P50":2.5`) {
		t.Fatalf("JSON %s: durations must be in ms", b)
	}
}

func TestParseSLO(t *testing.T) {
	cases := []struct {
		name, in string
		want     SLO
		err      string
	}{
		{"both", "ttft=2s,tpot=100ms", SLO{2 * time.Second, 100 * time.Millisecond}, ""},
		{"spaces_and_order", " tpot = 50ms , ttft=1s ", SLO{time.Second, 50 * time.Millisecond}, ""},
		{"ttft_only", "ttft=500ms", SLO{TTFT: 500 * time.Millisecond}, ""},
		{"empty_is_no_limit", "", SLO{}, ""},
		{"unknown_key", "itl=5ms", SLO{}, `key "itl"`},
		{"bad_duration", "ttft=2", SLO{}, `ttft="2"`},
		{"negative", "tpot=-1ms", SLO{}, `tpot="-1ms"`},
		{"no_equals", "ttft", SLO{}, `"ttft" must be key=duration`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseSLO(c.in)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err = %v, want %q", err, c.err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, c.want)
			}
		})
	}
}

func res(i int, arrival, ttft, e2e time.Duration, n int) Result {
	return Result{Index: i, Arrival: arrival, TTFT: ttft, E2E: e2e, OutputTokens: n, InputTokens: 100}
}

func TestSLOMetAndTPOT(t *testing.T) {
	slo := SLO{TTFT: time.Second, TPOT: 100 * time.Millisecond}
	cases := []struct {
		name string
		r    Result
		met  bool
	}{
		// TPOT = (e2e - ttft)/(n-1)
		{"tpot_exactly_at_limit", res(0, 0, time.Second, time.Second+900*time.Millisecond, 10), true},
		{"tpot_over", res(0, 0, 100*time.Millisecond, 100*time.Millisecond+910*time.Millisecond, 10), false},
		{"ttft_over", res(0, 0, time.Second+1, 2*time.Second, 100), false},
		{"single_token_has_no_tpot", res(0, 0, 500*time.Millisecond, 500*time.Millisecond, 1), true},
		{"failed", Result{TTFT: 1, E2E: 2, OutputTokens: 3, Err: "status 503"}, false},
		{"no_tokens", res(0, 0, 0, 0, 0), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := slo.Met(&c.r); got != c.met {
				t.Fatalf("Met = %v, want %v", got, c.met)
			}
		})
	}
	if v, ok := cases[0].r.TPOT(); !ok || v != 100*time.Millisecond {
		t.Fatalf("TPOT = %v %v, want 100ms", v, ok)
	}
}

func TestSummarizeGoodput(t *testing.T) {
	slo := SLO{TTFT: time.Second, TPOT: 50 * time.Millisecond}
	var rs []Result
	// 10 requests, one per second from t=0; odd ones miss TTFT; the last one ends at t=12s.
	for i := range 10 {
		ttft := 200 * time.Millisecond
		if i%2 == 1 {
			ttft = 2 * time.Second
		}
		rs = append(rs, res(i, time.Duration(i)*time.Second, ttft, ttft+time.Duration(19)*40*time.Millisecond, 20))
	}
	rs[9].E2E = 3 * time.Second // ends at 12 s
	rs[8].Route, rs[8].Reason = "decode", "bypass_isl"
	rs[7].Route, rs[7].Reason = "prefill", "remote_ratio_too_high"
	rs = append(rs, Result{Index: 10, Arrival: 10 * time.Second, Err: "status 503", Route: "decode", Reason: "bypass_isl"})

	s := Summarize("x", rs, slo, SteadyState{})
	if s.Requests != 11 || s.Completed != 10 || s.Failed != 1 {
		t.Fatalf("counts %d/%d/%d", s.Requests, s.Completed, s.Failed)
	}
	// Whole run: 5 good over first arrival (0) -> last completion (12 s).
	if s.Window != 12*time.Second || math.Abs(s.Goodput-5.0/12) > 1e-9 || s.Attainment != 0.5 {
		t.Fatalf("window %v goodput %v attainment %v; want 12s, 5/12, 0.5", s.Window, s.Goodput, s.Attainment)
	}
	if math.Abs(s.OutputTokPS-200.0/12) > 1e-9 {
		t.Fatalf("output tok/s %v, want 200/12", s.OutputTokPS)
	}
	// Steady state: arrivals in [2 s, 10 s − 3 s = 7 s]: requests 2..7, good ones 2,4,6.
	s = Summarize("x", rs, slo, SteadyState{Warmup: 2 * time.Second, Drain: 3 * time.Second})
	if s.Window != 5*time.Second || math.Abs(s.Goodput-3.0/5) > 1e-9 {
		t.Fatalf("steady window %v goodput %v; want 5s and 0.6", s.Window, s.Goodput)
	}
	if s.Routes["decode"] != 2 || s.Routes["prefill"] != 1 || s.Routes[""] != 8 || s.Reasons["bypass_isl"] != 2 || math.Abs(s.BypassRate-2.0/3) > 1e-9 {
		t.Fatalf("routes %v reasons %v bypass %v", s.Routes, s.Reasons, s.BypassRate)
	}
	if s.TTFT.P50 != 1100*time.Millisecond || s.TPOT.P50 != 40*time.Millisecond {
		t.Fatalf("TTFT p50 %v TPOT p50 %v", s.TTFT.P50, s.TPOT.P50)
	}
	if s.PrefixHitRate != 0 {
		t.Fatalf("prefix hit rate %v, want 0 (every result reports 0 cached tokens)", s.PrefixHitRate)
	}
	rs[0].CachedTokens, rs[0].InputTokens, rs[1].CachedTokens, rs[1].InputTokens = 300, 400, 0, 600
	for i := 2; i < len(rs); i++ {
		rs[i].CachedTokens = -1
	}
	if s = Summarize("x", rs, slo, SteadyState{}); s.PrefixHitRate != 0.3 {
		t.Fatalf("prefix hit rate %v, want 300/1000", s.PrefixHitRate)
	}
	if e := Summarize("empty", nil, slo, SteadyState{}); e.Goodput != 0 || e.Requests != 0 || e.BypassRate != -1 || e.PrefixHitRate != -1 {
		t.Fatalf("empty summary %+v", e)
	}
}

func TestWriteSummariesAligned(t *testing.T) {
	s := Summarize("isl_bounding", []Result{res(0, 0, 10*time.Millisecond, 50*time.Millisecond, 5)}, SLO{}, SteadyState{})
	var buf bytes.Buffer
	if err := WriteSummaries(&buf, []Summary{s, {Name: "always-disaggregated-long-name"}}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 3 || len(lines[0]) != len(lines[1]) || len(lines[1]) != len(lines[2]) {
		t.Fatalf("table lines not aligned:\n%s", buf.String())
	}
	if !strings.Contains(lines[1], "10.0ms") || !strings.Contains(lines[1], "100.0%") || !strings.HasPrefix(lines[2], "always-disaggregated-long-name") {
		t.Fatalf("unexpected table:\n%s", buf.String())
	}
}

func TestSummarizeByISL(t *testing.T) {
	slo := SLO{TTFT: time.Second}
	var rs []Result
	for i, isl := range []int{100, 2047, 2048, 9000, 40000, 50000} {
		r := res(i, time.Duration(i)*time.Second, 100*time.Millisecond, 200*time.Millisecond, 2)
		r.InputTokens = isl
		rs = append(rs, r)
	}
	rs[5].TTFT = 2 * time.Second
	rs[5].E2E = 4 * time.Second // last completion at 9 s
	got := SummarizeByISL("m", rs, slo, SteadyState{}, ISLBuckets())
	want := []struct {
		name string
		n    int
		good float64
	}{{"m isl<2k", 2, 2.0 / 9}, {"m isl 2-8k", 1, 1.0 / 9}, {"m isl 8-32k", 1, 1.0 / 9}, {"m isl>32k", 2, 1.0 / 9}}
	if len(got) != len(want) {
		t.Fatalf("%d buckets, want %d", len(got), len(want))
	}
	for i, w := range want {
		if got[i].Name != w.name || got[i].Requests != w.n || math.Abs(got[i].Goodput-w.good) > 1e-9 || got[i].Window != 9*time.Second {
			t.Errorf("bucket %d: %s %d reqs goodput %v window %v; want %s %d %v 9s", i, got[i].Name, got[i].Requests, got[i].Goodput, got[i].Window, w.name, w.n, w.good)
		}
	}
}
