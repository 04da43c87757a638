package tune

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/condisagg/condisagg/cost"
)

func tuneRun(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Command(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// TestTuneWiring runs a short simulation through the flags: the table goes to stdout, the JSON
// to --json-out, and nothing to stderr: --progress asks for the bar, but stderr here is no
// terminal.
func TestTuneWiring(t *testing.T) {
	jsonOut := filepath.Join(t.TempDir(), "report.json")
	code, out, errOut := tuneRun(t, "--synthetic", "vllm-prefix-repetition", "--requests", "60", "--cluster", "1p1d",
		"--slo", "ttft=1s,tpot=50ms", "--no-sweep", "--json-out", jsonOut, "--progress")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "workload synthetic vllm-prefix-repetition: 60 requests") || !strings.Contains(out, "cluster 1P1D;") {
		t.Errorf("table output:\n%s", out)
	}
	if errOut != "" {
		t.Errorf("progress drawn into a non-terminal stderr: %q", errOut)
	}
	data, err := os.ReadFile(jsonOut)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Requests int
		Modes    []struct{ Name string }
		Sweep    []struct{ Name string }
		Seed     *uint64           `json:"seed"`
		Commit   string            `json:"commit"`
		Flags    map[string]string `json:"flags"`
	}
	if err := json.Unmarshal(data, &rep); err != nil || rep.Requests != 60 || len(rep.Modes) != 7 || len(rep.Sweep) != 0 {
		t.Fatalf("--json-out: %v %+v", err, rep)
	}
	checkRecordsRun(t, rep.Seed, rep.Commit, rep.Flags, map[string]string{"synthetic": "vllm-prefix-repetition",
		"requests": "60", "cluster": "1p1d", "no-sweep": "true", "json-out": jsonOut, "progress": "true",
		"seed": "1", "sweep-eff": "auto", "sweep-ratio": "0.5,0.9,1", "model": "llama3.1-8b-h100", "duration": "0s", "o": "table"})
}

// checkRecordsRun asserts that a report records the seed, a commit, and every flag of `condisagg
// tune` with its effective value (given or default), as want spells some of them.
func checkRecordsRun(t *testing.T, seed *uint64, commit string, flags, want map[string]string) {
	t.Helper()
	if seed == nil || *seed != 1 {
		t.Errorf("seed %v, want 1", seed)
	}
	if commit == "" {
		t.Error("no commit")
	}
	c, f := DefaultConfig(), &tuneFlags{}
	tuneFlagSet(&c, f, io.Discard).VisitAll(func(fl *flag.Flag) {
		if _, ok := flags[fl.Name]; !ok {
			t.Errorf("flags lack --%s", fl.Name)
		}
	})
	for k, v := range want {
		if flags[k] != v {
			t.Errorf("flags[%s] = %q, want %q", k, flags[k], v)
		}
	}
}

func TestTuneFlagErrors(t *testing.T) {
	trace := filepath.Join(t.TempDir(), "trace.jsonl")
	if err := os.WriteFile(trace, []byte(`{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [1]}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no_workload", nil, "exactly one of --trace and --synthetic is required"},
		{"bad_shape", []string{"--trace", trace, "--cluster", "4X4"}, `--cluster: cluster: shape "4X4" must look like 4P4D`},
		{"bad_output", []string{"--trace", trace, "-o", "yaml"}, `-o: "yaml" must be table or json`},
		{"retired_quantile", []string{"--trace", trace, "--quantile", "0.25"}, "-quantile: the p-quantile rule was retired"},
		{"sweep_eff_not_integer", []string{"--trace", trace, "--sweep-eff", "12,x"}, `--sweep-eff: "x" is not an integer`},
		{"sweep_ratio_not_number", []string{"--trace", trace, "--sweep-ratio", "0.5,high"}, `--sweep-ratio: "high" is not a number`},
		{"sweep_ratio_range", []string{"--trace", trace, "--sweep-ratio", "1.5"}, `--sweep-ratio: 1.5 must be in [0, 1]`},
		{"sweep_margin_range", []string{"--trace", trace, "--sweep-margin", "0.1,1.5"}, `--sweep-margin: 1.5 must be in [0, 1]`},
		{"sweep_margin_not_number", []string{"--trace", trace, "--sweep-margin", "wide"}, `--sweep-margin: "wide" is not a number`},
		{"bad_sweep_policy", []string{"--trace", trace, "--sweep-policy", "prefill_load"}, "--sweep-policy"},
		{"bad_synthetic", []string{"--synthetic", "nope"}, `synthetic workload "nope" is not one of`},
		{"missing_trace", []string{"--trace", filepath.Join(t.TempDir(), "none.jsonl")}, "tune: open trace:"},
		{"unknown_flag", []string{"--bogus"}, "flag provided but not defined: -bogus"},
		{"stray_argument", []string{"--trace", trace, "extra"}, `unexpected arguments ["extra"]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := tuneRun(t, tc.args...)
			if code != 2 || out != "" || !strings.Contains(errOut, tc.want) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want 2 and %q", code, out, errOut, tc.want)
			}
		})
	}
	code, _, errOut := tuneRun(t, "--cluster", "x", "-o", "x", "--parallel", "0", "--sweep-eff", "y")
	for _, want := range []string{"--cluster", "-o:", "--parallel: 0", "--sweep-eff", "exactly one of"} {
		if code != 2 || !strings.Contains(errOut, want) {
			t.Errorf("all problems at once: %q lacks %q", errOut, want)
		}
	}
}

// TestMatrixSLOFlags: --slo-margin outside [0, 1] is refused before any run; both slo flags are
// recorded with the run.
func TestMatrixSLOFlags(t *testing.T) {
	var out, errb bytes.Buffer
	if code := MatrixCommand(context.Background(), []string{"--workloads", "b2b", "--slo-margin", "2"}, &out, &errb); code != 2 ||
		!strings.Contains(errb.String(), "--slo-margin: 2 must be in [0, 1]") {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
}

// TestMatrixCommandRecordsRun: `condisagg matrix --json-out` records the seed, a commit and every
// flag with its effective value beside the cells, so a reader can run the same matrix again.
func TestMatrixCommandRecordsRun(t *testing.T) {
	jsonOut := filepath.Join(t.TempDir(), "cells.json")
	var out, errb bytes.Buffer
	code := MatrixCommand(context.Background(), []string{"--workloads", "b2b", "--fleets", "1P2D", "--slos", "2s/100ms",
		"--duration", "5s", "--json-out", jsonOut, "--quiet"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	data, err := os.ReadFile(jsonOut)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Seed   *uint64           `json:"seed"`
		Commit string            `json:"commit"`
		Flags  map[string]string `json:"flags"`
		Cells  []Cell            `json:"cells"`
	}
	if err := json.Unmarshal(data, &doc); err != nil || len(doc.Cells) != 1 || doc.Cells[0].Workload != "b2b" {
		t.Fatalf("--json-out: %v, %d cells:\n%s", err, len(doc.Cells), data)
	}
	if doc.Seed == nil || *doc.Seed != 1 || doc.Commit == "" {
		t.Errorf("seed %v, commit %q; want 1 and a commit", doc.Seed, doc.Commit)
	}
	for k, v := range map[string]string{"workloads": "b2b", "fleets": "1P2D", "slos": "2s/100ms", "duration": "5s",
		"json-out": jsonOut, "quiet": "true", "seed": "1", "parallel": "2", "trace-dir": "", "svg": "", "model": "llama3.1-8b-h100",
		"slo-margin": "0.15", "slo-feedback": "false", "slo-fleet": "true"} {
		if got, ok := doc.Flags[k]; !ok || got != v {
			t.Errorf("flags[%s] = %q (present %v), want %q", k, got, ok, v)
		}
	}
}

// TestTuneNamesItsModelFile: the report says which cost model tune simulated with and, for a
// model file of condisagg calibrate, which file (table and JSON); a named calibration says so.
func TestTuneNamesItsModelFile(t *testing.T) {
	dir := t.TempDir()
	m, err := cost.ByName("llama3.1-8b-h200")
	if err != nil {
		t.Fatal(err)
	}
	m.Name = "h200-calibrated"
	data, err := cost.NewFile(m, nil).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	modelPath := filepath.Join(dir, "h200.yaml")
	if err := os.WriteFile(modelPath, data, 0o644); err != nil {
		t.Fatal(err)
	}
	jsonOut := filepath.Join(dir, "report.json")
	code, out, errOut := tuneRun(t, "--synthetic", "vllm-prefix-repetition", "--requests", "30", "--cluster", "1p1d",
		"--no-sweep", "--model", modelPath, "--json-out", jsonOut)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if want := "model h200-calibrated (model file " + modelPath + ")"; !strings.Contains(out, want) {
		t.Fatalf("table lacks %q:\n%s", want, out)
	}
	var rep struct {
		Model     string `json:"model"`
		ModelFile string `json:"model_file"`
	}
	if b, err := os.ReadFile(jsonOut); err != nil || json.Unmarshal(b, &rep) != nil || rep.Model != "h200-calibrated" || rep.ModelFile != modelPath {
		t.Fatalf("JSON model %q file %q (%v), want h200-calibrated from %s", rep.Model, rep.ModelFile, err, modelPath)
	}
	if code, out, _ := tuneRun(t, "--synthetic", "vllm-prefix-repetition", "--requests", "30", "--cluster", "1p1d", "--no-sweep"); code != 0 ||
		!strings.Contains(out, "model llama3.1-8b-h100 (named calibration)") {
		t.Fatalf("named model: exit %d:\n%s", code, out)
	}
}

// TestMatrixBaselines: --baselines reuses the baseline columns of an earlier --json-out. Only
// the slo policy's runs are simulated (two here, against twelve), the cells equal those of the
// run that simulated everything, and a stored run of another matrix is refused naming the flag
// that differs.
func TestMatrixBaselines(t *testing.T) {
	dir := t.TempDir()
	first, second := filepath.Join(dir, "first.json"), filepath.Join(dir, "second.json")
	args := []string{"--workloads", "b2b", "--fleets", "1P2D", "--slos", "2s/100ms,1s/50ms", "--duration", "5s"}
	run := func(extra ...string) (int, string) {
		var out, errb bytes.Buffer
		code := MatrixCommand(context.Background(), append(append([]string{}, args...), extra...), &out, &errb)
		return code, errb.String()
	}
	if code, errs := run("--json-out", first); code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	code, progress := run("--json-out", second, "--baselines", first)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, progress)
	}
	if !strings.Contains(progress, "matrix: 2/2 ") || strings.Contains(progress, "aggregated") {
		t.Fatalf("want only the two slo runs simulated:\n%s", progress)
	}
	read := func(path string) (doc struct {
		BaselinesCommit string `json:"baselines_commit"`
		Cells           []Cell `json:"cells"`
	}) {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(data, &doc); err != nil {
			t.Fatal(err)
		}
		return doc
	}
	a, b := read(first), read(second)
	if len(a.Cells) != 2 || !reflect.DeepEqual(a.Cells, b.Cells) || a.BaselinesCommit != "" || b.BaselinesCommit == "" {
		t.Fatalf("cells differ or commits wrong (%q, %q):\n%+v\n%+v", a.BaselinesCommit, b.BaselinesCommit, a.Cells, b.Cells)
	}
	if a.Cells[0].Best <= 0 {
		t.Fatalf("no baseline goodput in %+v", a.Cells[0])
	}
	if code, errs := run("--baselines", first, "--seed", "2"); code != 2 || !strings.Contains(errs, `--seed="1", this run "2"`) {
		t.Fatalf("another seed's baselines: exit %d: %s", code, errs)
	}
	if code, errs := run("--baselines", filepath.Join(dir, "missing.json")); code != 2 || !strings.Contains(errs, "--baselines") {
		t.Fatalf("a missing file: exit %d: %s", code, errs)
	}
}
