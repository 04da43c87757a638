package tune

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/condisagg/condisagg/cluster"
	"github.com/condisagg/condisagg/cost"
	"github.com/condisagg/condisagg/internal/importcheck"
	"github.com/condisagg/condisagg/internal/leakcheck"
	"github.com/condisagg/condisagg/policy"
	"github.com/condisagg/condisagg/sim"
	"github.com/condisagg/condisagg/workload"
)

func TestMain(m *testing.M) { leakcheck.Main(m, "condisagg/tune.") }

// TestImports keeps tune beside the simulator: no router shell, no transports, no binaries.
func TestImports(t *testing.T) {
	importcheck.Deny(t, importcheck.SourceFiles(t, "."), "net", "log/slog", "github.com/prometheus/",
		"github.com/go-zeromq/", "github.com/condisagg/condisagg/cmd", "github.com/condisagg/condisagg/extproc",
		"github.com/condisagg/condisagg/kvevents", "github.com/condisagg/condisagg/tokenizer")
}

// writeTrace writes a small Mooncake JSONL trace: sessions whose turns extend the previous
// prompt by one 512-token block, plus cold single requests.
func writeTrace(t *testing.T) string {
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

// countProgress adds up what Run reports.
type countProgress struct {
	mu          sync.Mutex // guards planned, done, plans
	planned     int
	done, plans int
}

func (p *countProgress) Plan(n int) { p.mu.Lock(); p.planned, p.plans = n, p.plans+1; p.mu.Unlock() }
func (p *countProgress) Advance(_ string, n int) {
	p.mu.Lock()
	p.done += n
	p.mu.Unlock()
}

// runConfig loads and runs c, failing t on any error.
func runConfig(t *testing.T, c Config, prog Progress) *Report {
	t.Helper()
	w, err := Load(&c)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Run(context.Background(), &c, w, Options{Progress: prog})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestRunTextReport(t *testing.T) {
	c := DefaultConfig()
	c.Synthetic, c.Requests, c.Cluster, c.SLO, c.NoSweep = "vllm-prefix-repetition", 60, "1P1D", "ttft=1s,tpot=50ms", true
	var out bytes.Buffer
	if err := runConfig(t, c, nil).WriteText(&out); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{
		"workload synthetic vllm-prefix-repetition: 60 requests",
		"cluster 1P1D; model llama3.1-8b-h100 (named calibration); SLO ttft=1s,tpot=50ms",
		"effective ISL on the previewed decode worker (always-remote probe, 60 requests):",
		"eff ISL (tokens)", "eff / ISL ratio",
		"routing modes:",
		"goodput/gpu  p util  d util",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	var rows []string
	inModes := false
	for _, line := range strings.Split(text, "\n") {
		switch {
		case line == "routing modes:":
			inModes = true
		case inModes && line == "":
			inModes = false
		case inModes && !strings.HasPrefix(line, "mode "):
			rows = append(rows, strings.Fields(line)[0])
		}
	}
	want := []string{"aggregated", "aggregated", "disaggregated", "isl_bounding", "prefill_load", "isl_or_load", "slo"}
	if strings.Join(rows, ",") != strings.Join(want, ",") {
		t.Fatalf("mode rows %v, want %v", rows, want)
	}
	if strings.Contains(text, "threshold sweep") || strings.Contains(text, "sweep (") {
		t.Fatal("NoSweep printed a sweep")
	}
}

// TestSweepMargin: --sweep-margin runs the slo policy once per slo_margin, as extra rows after
// the default slo row.
func TestSweepMargin(t *testing.T) {
	c := DefaultConfig()
	c.Synthetic, c.Requests, c.Cluster, c.SLO, c.NoSweep = "vllm-prefix-repetition", 60, "1P1D", "ttft=1s,tpot=50ms", true
	c.SweepMargin = []float64{0, 1}
	rep := runConfig(t, c, nil)
	var names []string
	for _, m := range rep.Modes {
		names = append(names, m.Name)
	}
	if n := len(names); n < 3 || names[n-3] != "slo" || names[n-2] != "slo margin=0" || names[n-1] != "slo margin=1" {
		t.Fatalf("mode rows %v; want slo, slo margin=0, slo margin=1 last", names)
	}
}

func TestRunSweepJSONAndPlots(t *testing.T) {
	c := DefaultConfig()
	c.Trace, c.Cluster = writeTrace(t), "1P2D"
	c.SweepEff, c.SweepRatio, c.SweepPrefillBusy = []int64{256, 1024}, []float64{0.9}, []float64{4}
	prog := &countProgress{}
	rep := runConfig(t, c, prog)
	// probe + 7 modes, then stage 1: two T values; stage 2: R=0.9; stage 3: isl_or_load θp=4
	if prog.plans != 1 || prog.planned != 12*48 || prog.done != prog.planned {
		t.Errorf("progress: %d plans of %d requests, %d done; want one plan of %d, all done", prog.plans, prog.planned, prog.done, 12*48)
	}
	var err error
	if rep.Plots, err = WritePlots(filepath.Join(t.TempDir(), "plots"), rep); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := rep.WriteJSON(&out); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Workload  string
		Requests  int
		Cluster   string
		EffISL    struct{ N int } `json:"eff_isl"`
		Recommend struct {
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
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("json: %v\n%s", err, out.String())
	}
	if got.Workload != "trace.jsonl" || got.Requests != 48 || got.Cluster != "1P2D" || got.EffISL.N != 48 {
		t.Fatalf("header %+v", got)
	}
	if got.Recommend.Sweep == nil {
		t.Fatalf("recommendation %+v", got.Recommend)
	}
	if len(got.Sweep) != 4 || !strings.Contains(got.Sweep[3].Name, "isl_or_load") || !strings.Contains(got.Sweep[3].Name, "θp=4") {
		t.Fatalf("sweep %+v", got.Sweep)
	}
	if n := len(got.Modes); n != 8 || got.Modes[6].Name != "slo" || !strings.HasPrefix(got.Modes[7].Name, "sweep best: ") {
		t.Fatalf("modes %+v", got.Modes)
	}
	for _, m := range got.Modes {
		if m.Summary.Completed != 48 {
			t.Errorf("%s completed %d of 48", m.Name, m.Summary.Completed)
		}
	}
	if m := got.Modes[0]; m.Mode != "aggregated" || m.GPUs != 2 || m.Summary.BypassRate != 1 || m.PrefillUtil != 0 {
		t.Errorf("aggregated row %+v", m)
	}
	if m := got.Modes[1]; m.GPUs != 3 {
		t.Errorf("aggregated on every GPU: %+v", m)
	}
	if m := got.Modes[2]; m.Mode != "disaggregated" || m.Summary.BypassRate != 0 || m.Config != "" {
		t.Errorf("disaggregated row %+v", m)
	}
	if m := got.Modes[3]; !strings.Contains(m.Config, `"policy":"isl_bounding"`) {
		t.Errorf("isl_bounding config %q", m.Config)
	}
	if len(got.Plots) != 3 {
		t.Fatalf("plots %v", got.Plots)
	}
	for _, p := range got.Plots {
		checkSVG(t, p)
	}
}

// checkSVG asserts that p is well-formed XML with an svg root that draws at least one line.
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
			if se.Name.Local == "polyline" || se.Name.Local == "path" {
				lines++
			}
		}
	}
	if root != "svg" || lines == 0 {
		t.Fatalf("%s: root %q, %d lines", p, root, lines)
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(c *Config)
		want string
	}{
		{"no_workload", func(c *Config) { c.Trace = "" }, "exactly one of --trace and --synthetic is required"},
		{"both_workloads", func(c *Config) { c.Synthetic = "agentic-code" }, "exactly one of"},
		{"shape_must_parse", func(c *Config) { c.Cluster = "4X4" }, `--cluster: cluster: shape "4X4" must look like 4P4D`},
		{"shape_needs_prefill", func(c *Config) { c.Cluster = "0P4D" }, "needs at least one prefill worker"},
		{"model_must_exist", func(c *Config) { c.Model = "gpt-5" }, "--model:"},
		{"slo_must_parse", func(c *Config) { c.SLO = "ttft=fast" }, "--slo:"},
		{"role_tolerance_unit_interval", func(c *Config) { c.RoleTolerance = 1 }, "--role-tolerance: 1 must be in [0, 1)"},
		{"parallel_bounded", func(c *Config) { c.Parallel = 65 }, "--parallel: 65 must be in [1, 64]"},
		{"rate_scale_positive", func(c *Config) { c.RateScale = 0 }, "--rate-scale: 0 must be > 0"},
		{"sweep_eff_non_negative", func(c *Config) { c.SweepEff = []int64{12, -1} }, "--sweep-eff: -1 must be >= 0"},
		{"sweep_ratio_unit_interval", func(c *Config) { c.SweepRatio = []float64{1.5} }, "--sweep-ratio: 1.5 must be in [0, 1]"},
		{"sweep_busy_non_negative", func(c *Config) { c.SweepPrefillBusy = []float64{-2} }, "--sweep-prefill-busy: -2 must be a number >= 0"},
		{"sweep_policy_has_isl_threshold", func(c *Config) { c.SweepPolicy = policy.PrefillLoad }, "--sweep-policy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			c.Trace = "trace.jsonl"
			tc.edit(&c)
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want %q", err, tc.want)
			}
		})
	}
	t.Run("every_problem_at_once", func(t *testing.T) {
		c := DefaultConfig()
		c.Cluster, c.Parallel = "x", 0
		err := c.Validate()
		for _, want := range []string{"--cluster", "--parallel: 0", "exactly one of"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("Validate() = %v, lacks %q", err, want)
			}
		}
	})
	t.Run("default_with_a_workload_is_valid", func(t *testing.T) {
		c := DefaultConfig()
		c.Synthetic = "agentic-code"
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
	})
}

func TestLoadErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(c *Config)
		want string
	}{
		{"unknown_synthetic", func(c *Config) { c.Synthetic = "nope" }, `synthetic workload "nope" is not one of`},
		{"missing_trace", func(c *Config) { c.Trace = filepath.Join(t.TempDir(), "none.jsonl") }, "tune: open trace:"},
		{"empty_trace", func(c *Config) { c.Trace = emptyFile(t) }, "has no requests"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.edit(&c)
			if _, err := Load(&c); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Load() = %v, want %q", err, tc.want)
			}
		})
	}
}

func emptyFile(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "empty.jsonl")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRunCancelled(t *testing.T) {
	c := DefaultConfig()
	c.Trace, c.Cluster = writeTrace(t), "1P1D"
	w, err := Load(&c)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Run(ctx, &c, w, Options{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run on a cancelled context = %v", err)
	}
}

// TestRoleAdvice: --role-advice runs aggregated on all GPUs and each policy on every split
// (1P2D: 0P3D, then 1P2D and 2P1D under disaggregated, isl_or_load and slo), names each
// policy's best split and the best of all, searches smaller fleets under slo, checks the
// analytic advice, and prints it all; the progress bar ends full even when the search stops
// early.
func TestRoleAdvice(t *testing.T) {
	c := DefaultConfig()
	c.Synthetic, c.Requests, c.Cluster, c.NoSweep, c.RoleAdvice = "llm-d-b2b", 120, "1P2D", true, true
	prog := &countProgress{}
	rep := runConfig(t, c, prog)
	var names []string
	for _, r := range rep.Splits {
		names = append(names, r.Name)
	}
	want := "0P3D aggregated,1P2D disaggregated,1P2D isl_or_load,1P2D slo,2P1D disaggregated,2P1D isl_or_load,2P1D slo"
	if strings.Join(names, ",") != want {
		t.Fatalf("splits %v, want %s", names, want)
	}
	if prog.planned != (8+7+1)*120 || prog.done != prog.planned {
		t.Fatalf("progress %d of %d", prog.done, prog.planned)
	}
	ra := rep.Recommend.Roles
	if ra == nil || ra.GPUs != 3 || len(ra.Best) != 4 {
		t.Fatalf("roles %+v", ra)
	}
	top := rep.Splits[0]
	for i, pol := range []string{"aggregated", "disaggregated", "isl_or_load", "slo"} {
		var b *Row
		for k := range rep.Splits {
			r := &rep.Splits[k]
			if strings.HasSuffix(r.Name, " "+pol) && (b == nil || r.Summary.Goodput > b.Summary.Goodput) {
				b = r
			}
			if r.Summary.Goodput > top.Summary.Goodput {
				top = *r
			}
		}
		if got := ra.Best[i]; got.Policy != pol || got.Goodput != b.Summary.Goodput || !strings.HasPrefix(b.Name, got.Split+" ") && b.Summary.Goodput != got.Goodput {
			t.Errorf("best %s = %+v, most goodput in %s (%v)", pol, got, b.Name, b.Summary.Goodput)
		}
	}
	if ra.Target != top.Summary.Goodput || top.Name != ra.Split+" "+ra.Policy && top.Summary.Goodput != ra.Target {
		t.Errorf("recommended %s %s (%v), most goodput in %s (%v)", ra.Split, ra.Policy, ra.Target, top.Name, top.Summary.Goodput)
	}
	// The search: the fewest GPUs is all 3 or, when a 2-GPU slo run was tried and served
	// enough, 2; either way within the tolerance of the target.
	enough := (1 - ra.Tolerance) * ra.Target
	if ra.Fewest != nil {
		if ra.Fewest.Goodput < enough || ra.Fewest.Policy != "slo" {
			t.Errorf("fewest %+v below %v", ra.Fewest, enough)
		}
		small := len(rep.Smaller) == 1 && rep.Smaller[0].Summary.Goodput >= enough
		if small != (ra.Fewest.GPUs == 2) {
			t.Errorf("fewest %+v, smaller rows %+v", ra.Fewest, rep.Smaller)
		}
	} else if len(rep.Smaller) != 0 || ra.SLOAtAll >= 1-ra.Tolerance {
		t.Errorf("no fewest, yet slo serves %v of the target and smaller rows %d", ra.SLOAtAll, len(rep.Smaller))
	}
	if a := ra.Analytic; a.OnDisagg == "" || a.BestDisagg == "" || !(a.AtAdvice > 0 && a.AtAdvice <= 1) || a.Agrees == (a.Why != "") {
		t.Errorf("analytic %+v", a)
	}
	var out bytes.Buffer
	if err := rep.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"role balance on 3 GPUs", "best split per policy:", "most goodput: " + ra.Split + " " + ra.Policy, "fewest GPUs for it:", "analytic advice (condisagg_role_advice_prefill_workers)"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("text lacks %q:\n%s", w, out.String())
		}
	}
}

// TestRoleSearchTolerance: the fewest-GPU search follows the tolerance. With a tolerance that
// lets any fleet serve (0.99), it walks down to two GPUs; with none, a smaller fleet counts
// only if it serves as much as the best run on all GPUs.
func TestRoleSearchTolerance(t *testing.T) {
	c := DefaultConfig()
	c.Synthetic, c.Requests, c.Cluster, c.NoSweep, c.RoleAdvice = "llm-d-b2b", 120, "2P2D", true, true
	c.RoleTolerance = 0.99
	ra := runConfig(t, c, nil).Recommend.Roles
	if ra == nil || ra.Fewest == nil || ra.Fewest.GPUs != 2 {
		t.Fatalf("tolerance 0.99: fewest %+v", ra)
	}
	c.RoleTolerance = 0
	rep := runConfig(t, c, nil)
	ra = rep.Recommend.Roles
	for _, r := range rep.Smaller {
		if ra.Fewest != nil && r.GPUs >= ra.Fewest.GPUs && r.Name == ra.Fewest.Split+" slo" && r.Summary.Goodput < ra.Target {
			t.Errorf("tolerance 0: fewest %+v serves less than the target %v", ra.Fewest, ra.Target)
		}
	}
}

// TestAnalyticCheck: the analytic advice is checked against the always-disaggregated splits;
// when its split serves well below the best one, the check says which pool limited it.
func TestAnalyticCheck(t *testing.T) {
	c := DefaultConfig()
	c.Synthetic, c.Cluster = "llm-d-b2b", "1P3D"
	p, err := c.resolve()
	if err != nil {
		t.Fatal(err)
	}
	r := &run{c: &c, p: p}
	// One request shape: 8k prompt tokens, none cached, 64 output tokens. Under the default
	// model prefill work is most of the GPU time, so the advice says 3P1D.
	results := make([]workload.Result, 50)
	for i := range results {
		results[i] = workload.Result{InputTokens: 8192, OutputTokens: 64, TTFT: time.Second, E2E: 2 * time.Second}
	}
	dis := func(prefill int, goodput, putil float64) *job {
		cfg := p.base
		cfg.Mode, cfg.Prefill, cfg.Decode = cluster.Disaggregated, prefill, 4-prefill
		return &job{name: fmt.Sprintf("%dP%dD disaggregated", prefill, 4-prefill), cfg: cfg,
			rep: &cluster.Report{Results: results, PrefillUtil: putil}, sum: workload.Summary{Goodput: goodput}}
	}
	adv := adviceOn(results, &policy.Config{Disagg: r.slo().Disagg}, 4)
	if !adv.Valid || adv.PrefillWorkers != 3 {
		t.Fatalf("advice %+v, want 3 prefill workers", adv)
	}
	// The best split is the advised one: agrees.
	a := r.analyticCheck([]*job{dis(1, 1, 0.9), dis(2, 2, 0.8), dis(3, 3, 0.7)}, nil)
	if !a.Agrees || a.BestDisagg != "3P1D" || a.AtAdvice != 1 || a.Why != "" {
		t.Errorf("agreeing: %+v", a)
	}
	// The best split is 1P3D and the advised 3P1D serves a third of it: differs, decode-bound.
	a = r.analyticCheck([]*job{dis(1, 3, 0.9), dis(2, 2, 0.8), dis(3, 1, 0.7)}, nil)
	if a.Agrees || a.BestDisagg != "1P3D" || math.Abs(a.AtAdvice-1.0/3) > 1e-9 || !strings.Contains(a.Why, "the decode pool") {
		t.Errorf("differing: %+v", a)
	}
	// One worker apart is not enough: the advised 3P1D serves a third of 2P2D's goodput, and
	// the best split has fewer prefill workers, so the decode pool is named. Within the
	// tolerance of the best it agrees even two workers apart.
	a = r.analyticCheck([]*job{dis(1, 1, 0.9), dis(2, 3, 0.8), dis(3, 1, 0.7)}, nil)
	if a.Agrees || a.BestDisagg != "2P2D" || !strings.Contains(a.Why, "the decode pool") {
		t.Errorf("one worker apart: %+v", a)
	}
	a = r.analyticCheck([]*job{dis(1, 1, 0.9), dis(2, 0.99, 0.8), dis(3, 0.985, 0.7)}, nil)
	if !a.Agrees || a.BestDisagg != "1P3D" || a.Why != "" {
		t.Errorf("within the tolerance: %+v", a)
	}
}

// TestSweepAutoGrid: with --sweep-eff auto, stage 1 tries the fixed thresholds and the
// quartiles of eff (the probe's effective ISL), each once, and the progress bar ends full.
func TestSweepAutoGrid(t *testing.T) {
	c := DefaultConfig()
	c.Synthetic, c.Requests, c.Cluster = "llm-d-b2b", 120, "1P2D"
	c.SweepRatio, c.SweepPrefillBusy = []float64{0.7}, nil
	prog := &countProgress{}
	rep := runConfig(t, c, prog)
	tried := map[int64]bool{}
	for _, r := range rep.Sweep {
		var d struct {
			T int64 `json:"eff_isl_threshold"`
		}
		if err := json.Unmarshal([]byte(r.Config), &d); err != nil {
			t.Fatal(err)
		}
		tried[d.T] = true
	}
	for _, want := range []float64{512, 1024, 2048, 4096, rep.EffISL.P25, rep.EffISL.P50, rep.EffISL.P75} {
		if !tried[int64(math.Round(want))] {
			t.Errorf("the sweep did not try %v (tried %v)", want, tried)
		}
	}
	if prog.done != prog.planned {
		t.Errorf("progress %d of %d", prog.done, prog.planned)
	}
}

// TestModelFile: --model takes a model file of condisagg calibrate; one holding a named
// calibration's coefficients simulates exactly as the name does, and a bad file is refused
// under --model.
func TestModelFile(t *testing.T) {
	m, err := sim.PerfModel(sim.DefaultPerfModel)
	if err != nil {
		t.Fatal(err)
	}
	m.Name = "from-file"
	data, err := cost.NewFile(m, nil).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "engine.yaml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	text := func(model string) string {
		c := DefaultConfig()
		c.Synthetic, c.Requests, c.Cluster, c.NoSweep, c.Model = "vllm-prefix-repetition", 40, "1P1D", true, model
		var out bytes.Buffer
		if err := runConfig(t, c, nil).WriteText(&out); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	byName, byFile := text(sim.DefaultPerfModel), text(path)
	if !strings.Contains(byFile, "model from-file (model file "+path+");") {
		t.Errorf("report does not name the file's model and the file:\n%s", byFile)
	}
	byFile = strings.Replace(byFile, "from-file (model file "+path+")", sim.DefaultPerfModel+" (named calibration)", 1)
	if byFile != byName {
		t.Errorf("the file simulates differently from the name:\n%s\nvs\n%s", byFile, byName)
	}
	c := DefaultConfig()
	c.Synthetic, c.Model = "agentic-code", filepath.Join(t.TempDir(), "missing.yaml")
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--model: cost: model file") {
		t.Errorf("missing file: %v", err)
	}
}
