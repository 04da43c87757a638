package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/condisagg/condisagg/cost"
)

// writeModelFile writes m as condisagg calibrate does (cost.NewFile(...).Marshal) and returns
// its path.
func writeModelFile(t *testing.T, dir, name string, m cost.Model) string {
	t.Helper()
	data, err := cost.NewFile(m, &cost.Calibration{Endpoint: "http://127.0.0.1:8000", Samples: 40}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return writeFile(t, dir, name, string(data))
}

var calibrated = cost.Model{Name: "qwen3-0.6b-cpu", T0: 12, A1: 0.4, A2: 2e-5, D1: 0.3, D2: 1e-4,
	BytesPerToken: 114688, XferAlphaMS: 0.8, XferGBps: 3, NumGPUBlocks: 4000}

// TestCostModelFile: router.cost_model_file gives the slo policy (live, and a shadow that
// names no cost_model) the calibrated model; a relative path in the file is relative to it.
func TestCostModelFile(t *testing.T) {
	model := requireModel(t)
	dir := t.TempDir()
	abs := writeModelFile(t, dir, "m.yaml", calibrated)
	cfgPath := writeFile(t, dir, "c.yaml", `
model: {tokenizer: `+model+`}
router:
  mode: kv
  kv_events: true
  conditional_disagg: true
  conditional_disagg_config: {policy: slo, slo_tpot_ms: 50}
  shadow_disagg_config: {policy: slo, cost_model: llama3.1-8b-h100}
  cost_model_file: m.yaml
`+workersYAML)
	c, err := loadArgs(t, "--config", cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	d := c.Settings.Policy.Disagg
	if d.Cost != calibrated || d.CostModelFile != abs || d.CostModelSource() != "file "+abs {
		t.Fatalf("live cost model %+v from %q, want %+v from %s", d.Cost, d.CostModelSource(), calibrated, abs)
	}
	if !strings.Contains(d.String(), `"cost_model_file":"`+abs+`"`) {
		t.Fatalf("policy string %s does not name the file", d.String())
	}
	if sh := c.Settings.Shadow.Disagg; sh.Cost.Name != "llama3.1-8b-h100" || sh.CostModelFile != "" {
		t.Fatalf("a shadow naming cost_model keeps it: got %+v from %q", sh.Cost, sh.CostModelSource())
	}

	// The flag overrides the file's key (relative to the working directory) and a shadow
	// without cost_model takes the file's model.
	other := calibrated
	other.Name, other.T0 = "other", 20
	otherPath := writeModelFile(t, t.TempDir(), "other.yml", other)
	shadowOnly := writeFile(t, dir, "s.yaml", `
model: {tokenizer: `+model+`}
router:
  mode: kv
  kv_events: true
  conditional_disagg: true
  shadow_disagg_config: {policy: slo}
`+workersYAML)
	c, err = loadArgs(t, "--config", shadowOnly, "--router-cost-model-file", otherPath)
	if err != nil {
		t.Fatal(err)
	}
	if sh := c.Settings.Shadow.Disagg; sh.Cost != other || sh.CostModelFile != otherPath {
		t.Fatalf("shadow cost model %+v from %q, want the flag's file", sh.Cost, sh.CostModelSource())
	}
	// The live isl_bounding policy does not read it: a warning says so.
	if w := strings.Join(c.Settings.Policy.Warnings(), "\n"); !strings.Contains(w, "cost_model_file") || !strings.Contains(w, "only the slo policy reads it") {
		t.Fatalf("warnings %q: want the unused cost_model_file named", w)
	}
}

// TestCostModelFileErrors: a model file that cannot be read or fails validation is refused at
// load with the key, the file and (where the YAML has one) the line.
func TestCostModelFileErrors(t *testing.T) {
	model := requireModel(t)
	dir := t.TempDir()
	good := writeModelFile(t, dir, "good.yaml", calibrated)
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	typo := writeFile(t, dir, "typo.yaml", strings.Replace(string(data), "d1:", "dl:", 1))
	negative := writeFile(t, dir, "negative.yaml", strings.Replace(string(data), "t0: 12", "t0: -12", 1))
	slo := "{policy: slo}"
	for _, tc := range []struct {
		name, file, policy string
		want               []string
	}{
		{"missing file", filepath.Join(dir, "nope.yaml"), slo, []string{"config: router.cost_model_file:", "nope.yaml", "no such file"}},
		{"unknown key with its line", typo, slo, []string{"config: router.cost_model_file:", "typo.yaml", `unknown key "dl"`, "line "}},
		{"invalid coefficient", negative, slo, []string{"config: router.cost_model_file:", "negative.yaml", "t0: -12 is not a finite value >= 0"}},
		{"not a model file", "llama3.1-8b-h100", slo, []string{`config: router.cost_model_file: "`, `llama3.1-8b-h100" must be a model file ending in .yaml or .yml`}},
		{"named twice", good, "{policy: slo, cost_model: llama3.1-8b-h100}", []string{"config: router.cost_model_file:", "good.yaml",
			"router.conditional_disagg_config: the policy object names cost_model too: keep one", `cost_model "llama3.1-8b-h100"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, t.TempDir(), "c.yaml", `
model: {tokenizer: `+model+`}
router:
  mode: kv
  kv_events: true
  conditional_disagg: true
  conditional_disagg_config: `+tc.policy+`
  cost_model_file: `+tc.file+`
`+workersYAML)
			_, err := loadArgs(t, "--config", path)
			if err == nil {
				t.Fatal("loaded; want an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// TestCostModelFileRequiredError: an slo policy with neither a named model nor a file says both
// ways to give one.
func TestCostModelFileRequiredError(t *testing.T) {
	model := requireModel(t)
	path := writeFile(t, t.TempDir(), "c.yaml", `
model: {tokenizer: `+model+`}
router: {mode: kv, kv_events: true, conditional_disagg: true, conditional_disagg_config: {policy: slo}}
`+workersYAML)
	_, err := loadArgs(t, "--config", path)
	if err == nil || !strings.Contains(err.Error(), `cost_model: "" is required with policy "slo"`) || !strings.Contains(err.Error(), "router.cost_model_file") {
		t.Fatalf("error %v: want cost_model or router.cost_model_file asked for", err)
	}
}
