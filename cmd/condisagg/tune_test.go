package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeTuneTrace writes a small Mooncake JSONL trace: sessions whose turns extend the previous
// prompt by one 512-token block, plus cold single requests.
func writeTuneTrace(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	next := 1
	for i := range 48 {
		var ids []string
		turns := 1 + i%4
		for range turns {
			ids = append(ids, fmt.Sprint(next))
			next++
		}
		in := 512*turns - 100
		fmt.Fprintf(&b, `{"timestamp": %d, "input_length": %d, "output_length": %d, "hash_ids": [%s]}`+"\n",
			i*150, in, 20+i%7, strings.Join(ids, ", "))
	}
	p := filepath.Join(t.TempDir(), "trace.jsonl")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func tuneRun(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = runTune(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestTuneTableOutput(t *testing.T) {
	jsonOut := filepath.Join(t.TempDir(), "report.json")
	code, out, errOut := tuneRun(t, "--synthetic", "vllm-prefix-repetition", "--requests", "60", "--cluster", "1P1D",
		"--slo", "ttft=1s,tpot=50ms", "--no-sweep", "--json-out", jsonOut)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"workload synthetic vllm-prefix-repetition: 60 requests",
		"cluster 1P1D; model llama3.1-8b-h100; SLO ttft=1s,tpot=50ms",
		"effective ISL on the previewed decode worker (always-remote probe, 60 requests):",
		"eff ISL (tokens)", "eff / ISL ratio",
		"p-quantile rule (p=0.25): eff_isl_threshold=",
		"routing modes:",
		"goodput/gpu  p util  d util",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	var rows []string
	inModes := false
	for _, line := range strings.Split(out, "\n") {
		switch {
		case line == "routing modes:":
			inModes = true
		case inModes && line == "":
			inModes = false
		case inModes && !strings.HasPrefix(line, "mode "):
			rows = append(rows, strings.Fields(line)[0])
		}
	}
	want := []string{"aggregated", "aggregated", "disaggregated", "isl_bounding", "prefill_load", "isl_or_load"}
	if strings.Join(rows, ",") != strings.Join(want, ",") {
		t.Fatalf("mode rows %v, want %v", rows, want)
	}
	if strings.Contains(out, "threshold sweep") || strings.Contains(out, "sweep (") {
		t.Fatal("--no-sweep printed a sweep")
	}
	if errOut != "" {
		t.Fatalf("short run drew progress: %q", errOut)
	}
	data, err := os.ReadFile(jsonOut)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Requests int
		Modes    []struct{ Name string }
		Sweep    []struct{ Name string }
	}
	if err := json.Unmarshal(data, &rep); err != nil || rep.Requests != 60 || len(rep.Modes) != 6 || len(rep.Sweep) != 0 {
		t.Fatalf("--json-out: %v %+v", err, rep)
	}
}

func TestTuneJSONAndPlots(t *testing.T) {
	trace := writeTuneTrace(t)
	plots := filepath.Join(t.TempDir(), "plots")
	code, out, errOut := tuneRun(t, "--trace", trace, "--cluster", "1P2D", "-o", "json", "--sweep-eff", "256,1024",
		"--sweep-ratio", "0.9", "--sweep-prefill-busy", "4", "--plots", plots, "--progress")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep struct {
		Workload  string
		Requests  int
		Cluster   string
		EffISL    struct{ N int } `json:"eff_isl"`
		Recommend struct {
			Quantile struct {
				P   float64
				Eff int64 `json:"eff_isl_threshold"`
			} `json:"p_quantile"`
			Sweep *struct {
				Policy string
				Eff    int64 `json:"eff_isl_threshold"`
			}
		}
		Modes []struct {
			Name, Mode, Config string
			GPUs               int
			Summary            struct {
				Requests, Completed int
				BypassRate          float64
			}
			PrefillUtil float64 `json:"prefill_util"`
		}
		Sweep []struct{ Name string }
		Plots []string
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("json: %v\n%s", err, out)
	}
	if rep.Workload != "trace.jsonl" || rep.Requests != 48 || rep.Cluster != "1P2D" || rep.EffISL.N != 48 {
		t.Fatalf("header %+v", rep)
	}
	if rep.Recommend.Quantile.P != 0.25 || rep.Recommend.Sweep == nil {
		t.Fatalf("recommendation %+v", rep.Recommend)
	}
	// stage 1: two T values; stage 2: R=0.9; stage 3: isl_or_load θp=4
	if len(rep.Sweep) != 4 || !strings.Contains(rep.Sweep[3].Name, "isl_or_load") || !strings.Contains(rep.Sweep[3].Name, "θp=4") {
		t.Fatalf("sweep %+v", rep.Sweep)
	}
	if n := len(rep.Modes); n != 7 || !strings.HasPrefix(rep.Modes[6].Name, "sweep best: ") {
		t.Fatalf("modes %+v", rep.Modes)
	}
	for _, m := range rep.Modes {
		if m.Summary.Completed != 48 {
			t.Errorf("%s completed %d of 48", m.Name, m.Summary.Completed)
		}
	}
	if m := rep.Modes[0]; m.Mode != "aggregated" || m.GPUs != 2 || m.Summary.BypassRate != 1 || m.PrefillUtil != 0 {
		t.Errorf("aggregated row %+v", m)
	}
	if m := rep.Modes[1]; m.GPUs != 3 {
		t.Errorf("aggregated on every GPU: %+v", m)
	}
	if m := rep.Modes[2]; m.Mode != "disaggregated" || m.Summary.BypassRate != 0 || m.Config != "" {
		t.Errorf("disaggregated row %+v", m)
	}
	if m := rep.Modes[3]; !strings.Contains(m.Config, `"policy":"isl_bounding"`) {
		t.Errorf("isl_bounding config %q", m.Config)
	}
	if len(rep.Plots) != 3 {
		t.Fatalf("plots %v", rep.Plots)
	}
	for _, p := range rep.Plots {
		checkSVG(t, p)
	}
	if !strings.Contains(errOut, "tune [") || !strings.Contains(errOut, "100.0%") {
		t.Fatalf("no progress bar on stderr: %q", errOut)
	}
}

// checkSVG asserts that p is well-formed XML with an svg root and at least one polyline.
func checkSVG(t *testing.T, p string) {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(data))
	var root string
	lines := 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if se, ok := tok.(xml.StartElement); ok {
			if root == "" {
				root = se.Name.Local
			}
			if se.Name.Local == "polyline" {
				lines++
			}
		}
	}
	if root != "svg" || lines == 0 {
		t.Fatalf("%s: root %q, %d polylines", p, root, lines)
	}
}

func TestTuneFlagErrors(t *testing.T) {
	trace := writeTuneTrace(t)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no_workload", nil, "exactly one of --trace and --synthetic is required"},
		{"both_workloads", []string{"--trace", trace, "--synthetic", "agentic-code"}, "exactly one of"},
		{"bad_shape", []string{"--trace", trace, "--cluster", "4X4"}, `--cluster: cluster: shape "4X4" must look like 4P4D`},
		{"no_prefill", []string{"--trace", trace, "--cluster", "0P4D"}, "needs at least one prefill worker"},
		{"bad_model", []string{"--trace", trace, "--model", "gpt-5"}, "--model:"},
		{"bad_slo", []string{"--trace", trace, "--slo", "ttft=fast"}, "--slo:"},
		{"bad_output", []string{"--trace", trace, "-o", "yaml"}, `-o: "yaml" must be table or json`},
		{"bad_quantile", []string{"--trace", trace, "--quantile", "1"}, "--quantile: 1 must be in (0, 1)"},
		{"bad_sweep_eff", []string{"--trace", trace, "--sweep-eff", "12,x"}, `--sweep-eff: "x" must be a non-negative integer`},
		{"bad_sweep_ratio", []string{"--trace", trace, "--sweep-ratio", "1.5"}, `--sweep-ratio: "1.5" must be in [0, 1]`},
		{"bad_sweep_policy", []string{"--trace", trace, "--sweep-policy", "prefill_load"}, "--sweep-policy"},
		{"bad_synthetic", []string{"--synthetic", "nope"}, `synthetic workload "nope" is not one of`},
		{"missing_trace", []string{"--trace", filepath.Join(t.TempDir(), "none.jsonl")}, "tune: open trace:"},
		{"unknown_flag", []string{"--bogus"}, "flag provided but not defined: -bogus"},
		{"all_at_once", []string{"--cluster", "x", "-o", "x", "--parallel", "0"}, "--cluster: cluster: shape"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := tuneRun(t, tc.args...)
			if code != 2 || out != "" || !strings.Contains(errOut, tc.want) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want 2 and %q", code, out, errOut, tc.want)
			}
		})
	}
	code, _, errOut := tuneRun(t, "--cluster", "x", "-o", "x", "--parallel", "0")
	for _, want := range []string{"--cluster", "-o:", "--parallel: 0", "exactly one of"} {
		if code != 2 || !strings.Contains(errOut, want) {
			t.Errorf("all problems at once: %q lacks %q", errOut, want)
		}
	}
}

func TestTuneCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out, errb bytes.Buffer
	code := runTune(ctx, []string{"--trace", writeTuneTrace(t), "--cluster", "1P1D", "--quiet"}, &out, &errb)
	if code != 1 || !strings.Contains(errb.String(), "context canceled") {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
}

func TestChartTicksAndEscaping(t *testing.T) {
	for _, tc := range []struct {
		lo, hi float64
		log    bool
		want   string
	}{
		{0, 1, false, "[0 0.2 0.4 0.6 0.8 1]"},
		{0, 2300, false, "[0 500 1000 1500 2000]"},
		{3, 4000, true, "[10 100 1000]"},
		{20, 40, true, "[20 25 30 35 40]"},          // under two decades: linear ticks
		{512, 4096, true, "[1000 2000 3000 4000]"},  // one decade inside: linear, no duplicate
		{-1e-17, 1, false, "[0 0.2 0.4 0.6 0.8 1]"}, // rounding noise
	} {
		if got := fmt.Sprint(plotTicks(tc.lo, tc.hi, tc.log)); got != tc.want {
			t.Errorf("plotTicks(%v, %v, %v) = %s, want %s", tc.lo, tc.hi, tc.log, got, tc.want)
		}
	}
	c := plotChart{title: "a < b & c", lines: []plotSeries{{name: "<x>", x: []float64{1, 2}, y: []float64{3, 4}}}}
	p := filepath.Join(t.TempDir(), "c.svg")
	if err := os.WriteFile(p, []byte(c.svg()), 0o644); err != nil {
		t.Fatal(err)
	}
	checkSVG(t, p)
}
