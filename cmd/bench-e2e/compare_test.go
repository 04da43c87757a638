package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/condisagg/condisagg/policy"
	"github.com/condisagg/condisagg/workload"
)

func TestToSimulatedMultipliesWallByTimeScale(t *testing.T) {
	for _, c := range []struct {
		wall  time.Duration
		scale float64
		want  time.Duration
	}{
		{10 * time.Millisecond, 10, 100 * time.Millisecond},
		{10 * time.Millisecond, 1, 10 * time.Millisecond},
		{3 * time.Millisecond, 2.5, 7500 * time.Microsecond},
		{0, 10, 0},
	} {
		if got := toSimulated(c.wall, c.scale); got != c.want {
			t.Errorf("toSimulated(%v, %g) = %v, want %v", c.wall, c.scale, got, c.want)
		}
	}
}

func TestRowDiffAndTolerance(t *testing.T) {
	for _, c := range []struct {
		name      string
		live, sim time.Duration
		diff      float64
		within    bool
	}{
		{"equal", 100, 100, 0, true},
		{"15_percent_slower_is_within", 115, 100, 0.15, true},
		{"16_percent_slower_is_outside", 116, 100, 0.16, false},
		{"15_percent_faster_is_within", 85, 100, -0.15, true},
		{"both_zero", 0, 0, 0, true},
		{"simulated_zero", 5, 0, math.Inf(1), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := row{Metric: "m", Live: c.live, Simulated: c.sim}
			if got := r.diff(); math.Abs(got-c.diff) > 1e-12 && got != c.diff {
				t.Errorf("diff = %v, want %v", got, c.diff)
			}
			if got := r.within(DefaultTolerance); got != c.within {
				t.Errorf("within = %v, want %v", got, c.within)
			}
		})
	}
}

func TestWriteComparisonVerdictCoversHeadlineRowsOnly(t *testing.T) {
	ms := time.Millisecond
	agree := []row{{"TTFT p50", 110 * ms, 100 * ms}, {"TPOT p50", 10 * ms, 10 * ms}, {"TTFT p90", 300 * ms, 100 * ms}}
	var out bytes.Buffer
	ok, err := writeComparison(&out, agree, 0.15)
	if err != nil || !ok {
		t.Fatalf("headline rows within 15 %%: ok=%v err=%v, want true (a context row may differ)\n%s", ok, err, out.String())
	}
	for _, want := range []string{"TTFT p50", "110.0 ms", "+10.0", "NO (context)", "+200.0"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	differ := []row{{"TTFT p50", 100 * ms, 100 * ms}, {"TPOT p50", 20 * ms, 10 * ms}}
	if ok, _ := writeComparison(&out, differ, 0.15); ok {
		t.Error("TPOT p50 +100 %: ok = true, want false")
	}
}

// The fixture is a real loadgen -o json document; the parse must give back its quantiles.
func TestParseLoadgenRealReport(t *testing.T) {
	b, err := os.ReadFile("testdata/loadgen_report_vllmsim_4req.json")
	if err != nil {
		t.Fatal(err)
	}
	s, rep, err := parseLoadgen(b)
	if err != nil {
		t.Fatal(err)
	}
	if s.Requests != 4 || s.Completed != 4 || s.Failed != 0 || s.TTFT.N != 4 {
		t.Errorf("counts = %d/%d/%d, TTFT.N %d; want 4/4/0, 4", s.Requests, s.Completed, s.Failed, s.TTFT.N)
	}
	if got, want := s.TTFT.P50, time.Duration(13.48959*float64(time.Millisecond)); got != want {
		t.Errorf("TTFT p50 = %v, want %v", got, want)
	}
	if got, want := s.TPOT.P50, time.Duration(1.228254*float64(time.Millisecond)); got != want {
		t.Errorf("TPOT p50 = %v, want %v", got, want)
	}
	if rep.SendLag.N != 4 {
		t.Errorf("send lag N = %d, want 4", rep.SendLag.N)
	}
	sim := toSimulatedSummary(s, 20)
	if got, want := sim.TPOT.P50, toSimulated(s.TPOT.P50, 20); got != want || got < 24*time.Millisecond {
		t.Errorf("TPOT p50 at time scale 20 = %v, want %v (about 24.6 ms)", got, want)
	}
}

// workload's own encoder and parseLoadgen agree on every quantile (milliseconds both ways).
func TestParseLoadgenRoundTripsWorkloadEncoding(t *testing.T) {
	results := []workload.Result{
		{Index: 0, TTFT: 200 * time.Millisecond, E2E: 1200 * time.Millisecond, OutputTokens: 101, InputTokens: 10, Route: "prefill", Reason: "remote_isl_too_long"},
		{Index: 1, TTFT: 50 * time.Millisecond, E2E: 550 * time.Millisecond, OutputTokens: 51, InputTokens: 10, Route: "decode", Reason: "bypass_isl"},
	}
	sum := workload.Summarize("live", results, workload.SLO{}, workload.SteadyState{})
	b, err := json.Marshal(struct {
		Summary workload.Summary
		SendLag workload.Dist[time.Duration]
		Errors  []string
	}{sum, workload.NewDist([]time.Duration{time.Millisecond}), []string{"boom"}})
	if err != nil {
		t.Fatal(err)
	}
	got, rep, err := parseLoadgen(b)
	if err != nil {
		t.Fatal(err)
	}
	for name, pair := range map[string][2]workload.Dist[time.Duration]{"TTFT": {got.TTFT, sum.TTFT}, "TPOT": {got.TPOT, sum.TPOT}, "E2E": {got.E2E, sum.E2E}} {
		g, w := pair[0], pair[1]
		if g.N != w.N || absDur(g.P50-w.P50) > time.Microsecond || absDur(g.P90-w.P90) > time.Microsecond {
			t.Errorf("%s: got %+v, want %+v", name, g, w)
		}
	}
	if got.Routes["prefill"] != 1 || got.Reasons["bypass_isl"] != 1 || !slices.Equal(rep.Errors, []string{"boom"}) {
		t.Errorf("routes %v reasons %v errors %v", got.Routes, got.Reasons, rep.Errors)
	}
}

func TestParseLoadgenRejectsBadInput(t *testing.T) {
	for name, in := range map[string][]byte{
		"empty":      nil,
		"truncated":  []byte(`{"Summary": {"Requests": 3`),
		"wrong_type": []byte(`{"Summary": {"TTFT": {"P50": "fast"}}}`),
		"oversized":  bytes.Repeat([]byte(" "), maxReportBytes+1),
	} {
		if _, _, err := parseLoadgen(in); err == nil || !strings.Contains(err.Error(), "bench-e2e:") {
			t.Errorf("%s: err = %v, want a bench-e2e error", name, err)
		}
	}
}

func FuzzParseLoadgen(f *testing.F) {
	b, err := os.ReadFile("testdata/loadgen_report_vllmsim_4req.json")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		s, _, err := parseLoadgen(in)
		if err != nil && s.Requests != 0 {
			t.Fatalf("error %v with a non-empty summary", err)
		}
	})
}

func absDur(d time.Duration) time.Duration { return max(d, -d) }

func TestLoadgenArgsCompressArrivalsByTheTimeScale(t *testing.T) {
	o := options{synthetic: "llm-d-b2b", seed: 3, requests: 60, concurrency: 8, timeout: time.Minute}
	args := loadgenArgs(&o, "http://x/v1/completions", 10)
	joined := strings.Join(args, " ")
	for _, want := range []string{"--time-scale 0.1", "--synthetic llm-d-b2b", "--seed 3", "--max-requests 60", "-o json", "--url http://x/v1/completions"} {
		if !strings.Contains(joined, want) {
			t.Errorf("args %q lack %q", joined, want)
		}
	}
	o.trace = "t.jsonl"
	joined = strings.Join(loadgenArgs(&o, "u", 4), " ")
	if !strings.Contains(joined, "--trace t.jsonl") || strings.Contains(joined, "--synthetic") || !strings.Contains(joined, "--time-scale 0.25") {
		t.Errorf("trace args %q: want --trace, no --synthetic, --time-scale 0.25", joined)
	}
}

func TestParseFlags(t *testing.T) {
	o, err := parseFlags(nil, &bytes.Buffer{})
	if err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if o.prefill != 1 || o.decode != 2 || !slices.Equal(o.timeScales, []float64{1, 10}) {
		t.Errorf("defaults: %dP%dD scales %v, want 1P2D [1 10]", o.prefill, o.decode, o.timeScales)
	}
	_, err = parseFlags([]string{"-cluster", "xx", "-time-scale", "1,0", "-requests", "0", "extra"}, &bytes.Buffer{})
	for _, want := range []string{"--cluster", "--time-scale", "--requests", "unexpected arguments"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("bad flags: err = %v, want it to name %s", err, want)
		}
	}
}

// The simulated twin uses the live router's policy text and queue threshold.
func TestClusterConfigMirrorsTheStack(t *testing.T) {
	o, err := parseFlags([]string{"-cluster", "2P3D", "-num-gpu-blocks", "4096"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clusterConfig(&o)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := policy.ParseDisagg([]byte(demoDisagg))
	if cfg.Prefill != 2 || cfg.Decode != 3 || cfg.Engine.NumGPUBlocks != 4096 || cfg.Engine.MaxNumBatchedTokens != 8192 ||
		cfg.Disagg != want || cfg.QueueThreshold != policy.Set(2) {
		t.Errorf("cluster config %+v does not mirror the options", cfg)
	}
	o.disagg = `{"policy":"nope"}`
	if _, err := clusterConfig(&o); err == nil || !strings.Contains(err.Error(), "--disagg") {
		t.Errorf("bad policy: err = %v, want a --disagg error", err)
	}
}

func TestSliceAndSimulateDefaults(t *testing.T) {
	o, err := parseFlags([]string{"-requests", "12"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	reqs, err := slice(&o)
	if err != nil || len(reqs) != 12 {
		t.Fatalf("slice: %d requests, err %v; want 12", len(reqs), err)
	}
	rep, sum, err := simulate(t.Context(), &o, reqs)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Completed != 12 || rep.ResidualLoad != 0 || sum.TTFT.P50 <= 0 || sum.TPOT.P50 <= 0 {
		t.Errorf("simulated: completed %d residual %d TTFT p50 %v TPOT p50 %v", sum.Completed, rep.ResidualLoad, sum.TTFT.P50, sum.TPOT.P50)
	}
	if sum.Routes["prefill"]+sum.Routes["decode"] != 12 {
		t.Errorf("routes %v: want the 12 decisions counted", sum.Routes)
	}
}

func TestNewScaleRunDividesByTheScale(t *testing.T) {
	ms := time.Millisecond
	live := workload.Summary{TTFT: workload.Dist[time.Duration]{Mean: 600 * ms}, Gap: workload.Dist[time.Duration]{Mean: 17 * ms}}
	sim := workload.Summary{TTFT: workload.Dist[time.Duration]{Mean: 200 * ms}, Gap: workload.Dist[time.Duration]{Mean: 9 * ms}}
	rows := []row{{"TTFT p50", 600 * ms, 200 * ms}, {"TPOT p50", 17 * ms, 9 * ms}}
	r := newScaleRun(10, rows, 0.15, &live, &sim, 16*ms, 0)
	if r.Agree {
		t.Error("TTFT p50 +200 %: Agree = true")
	}
	if r := newScaleRun(1, rows[:0], 0.15, &live, &sim, 16*ms, 0); !r.Agree {
		t.Error("no rows: Agree = false")
	}
	if r.PacingWall != 700*time.Microsecond || r.HTTPWall != 100*time.Microsecond || r.TTFTWall != 40*ms {
		t.Errorf("pacing %v http %v ttft %v, want 700µs 100µs 40ms", r.PacingWall, r.HTTPWall, r.TTFTWall)
	}
}

func TestWriteVerdictNamesScalesAndExplainsADifference(t *testing.T) {
	o := options{synthetic: "llm-d-b2b", seed: 1, shape: "1P2D", tolerance: 0.15}
	ms := time.Millisecond
	runs := []scaleRun{
		{Scale: 1, Agree: true, Rows: []row{{"TTFT p50", 105 * ms, 100 * ms}, {"TPOT p50", 10 * ms, 10 * ms}}},
		{Scale: 10, Rows: []row{{"TTFT p50", 300 * ms, 100 * ms}, {"TPOT p50", 18 * ms, 10 * ms}}},
	}
	var out bytes.Buffer
	if err := writeVerdict(&out, &o, runs, time.Second); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{"agree within 15 % at time scale [1], differ at [10]", "+200.0", "+80.0", "Why the live stack"} {
		if !strings.Contains(s, want) {
			t.Errorf("verdict lacks %q:\n%s", want, s)
		}
	}
	out.Reset()
	_ = writeVerdict(&out, &o, runs[:1], time.Second)
	if strings.Contains(out.String(), "Why the live stack") {
		t.Error("explanation printed although every scale agrees")
	}
}

func TestTimerOvershootStopsOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if got := timerOvershoot(ctx, time.Hour, 5); got != 0 {
		t.Errorf("cancelled: %v, want 0", got)
	}
	if got := timerOvershoot(t.Context(), 100*time.Microsecond, 3); got < 0 {
		t.Errorf("overshoot %v < 0", got)
	}
}
