package serveconfig

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/condisagg/condisagg/internal/repo"

	"github.com/condisagg/condisagg/extproc"
	"github.com/condisagg/condisagg/policy"
)

// requireModel is the Qwen3 tokenizer directory of the test models.
func requireModel(t *testing.T) string { return repo.TestModel(t, "qwen3") }

func writeFile(t *testing.T, dir, name, text string) string {
	return repo.WriteFile(t, dir, name, text)
}

const workersYAML = `workers:
  - {name: prefill-0, role: prefill, endpoint: 127.0.0.1:8100, max_num_batched_tokens: 8192}
  - {name: decode-0, role: decode, endpoint: 127.0.0.1:8200, num_gpu_blocks: 40000}
`

func loadArgs(t *testing.T, args ...string) (*Config, error) {
	t.Helper()
	f := NewFlags()
	if err := f.FS.Parse(args); err != nil {
		t.Fatal(err)
	}
	return f.Load()
}

// TestConfigFileAndFlags: the YAML file sets every section; a flag overrides the file.
func TestConfigFileAndFlags(t *testing.T) {
	model := requireModel(t)
	dir := t.TempDir()
	path := writeFile(t, dir, "c.yaml", `
listen: 127.0.0.1:0
failure_mode: closed
max_body_bytes: 2048
stream_idle_timeout: 45s
decision_queue_timeout: 500ms
decision_concurrency: 3
model: {tokenizer: `+model+`, block_size: 16}
router:
  mode: kv
  kv_events: true
  conditional_disagg: true
  conditional_disagg_config: {policy: isl_or_load, eff_isl_threshold: 1024, decode_busy_threshold: 0.8}
  queue_threshold: 2
  credit_weight: 0.5
  kv_events_silence: 60s
`+workersYAML)
	c, err := loadArgs(t, "--config", path, "--failure-mode", "open", "--debug-headers")
	if err != nil {
		t.Fatal(err)
	}
	s := c.Settings
	if s.FailureMode != extproc.FailOpen || !s.DebugHeaders || s.MaxBodyBytes != 2048 ||
		s.StreamIdleTimeout != 45*time.Second || s.DecisionQueueTimeout != 500*time.Millisecond || c.DecisionConcurrency != 3 {
		t.Fatalf("settings %+v, decision_concurrency %d", s, c.DecisionConcurrency)
	}
	p := s.Policy
	if !p.Enabled || p.Disagg.Policy != policy.ISLOrLoad || p.Disagg.EffISLThreshold != 1024 ||
		p.Disagg.DecodeBusyThreshold != policy.Set(0.8) || p.QueueThreshold != policy.Set(2) ||
		p.Selection.CreditWeight != 0.5 || p.Selection.HostWeight != 0.75 || p.Silence.After.Seconds() != 60 || !p.DistinctPools {
		t.Fatalf("policy %+v", p)
	}
	if len(c.Pool.Workers) != 2 || c.Pool.BlockSize != 16 {
		t.Fatalf("pool %+v", c.Pool)
	}
	// Dynamo's JSON flag replaces the file's object.
	c, err = loadArgs(t, "--config", path, "--router-conditional-disagg-config", `{"policy":"prefill_load"}`)
	if err != nil || c.Settings.Policy.Disagg.Policy != policy.PrefillLoad {
		t.Fatalf("flag JSON: %v %v", c, err)
	}
	// The resource bounds' defaults.
	c, err = loadArgs(t, "--tokenizer", model, "--config", writeFile(t, dir, "w.yaml", workersYAML))
	if err != nil || c.Settings.StreamIdleTimeout != extproc.DefaultStreamIdleTimeout ||
		c.Settings.DecisionQueueTimeout != extproc.DefaultDecisionQueueTimeout || c.DecisionConcurrency != 0 {
		t.Fatalf("defaults: %+v %v", c, err)
	}
}

// TestConfigValidation: every problem is reported at once in field/value/rule form.
func TestConfigValidation(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, dir, "bad.yaml", `
failure_mode: sometimes
max_body_bytes: 0
stream_idle_timeout: 2h
decision_queue_timeout: 0s
decision_concurrency: -1
log_level: loud
model: {tokenizer: /nonexistent/model}
router:
  mode: round_robin
  conditional_disagg: true
  conditional_disagg_config: {eff_isl_ratio_threshold: 1.5, polcy: x}
workers:
  - {name: d, role: decode, endpoint: 127.0.0.1:8200}
`)
	_, err := loadArgs(t, "--config", path, "--tls-cert", "cert.pem")
	if err == nil {
		t.Fatal("bad config accepted")
	}
	for _, want := range []string{
		`failure_mode: "sometimes" must be one of open, closed`,
		"max_body_bytes: 0 is outside [1, 1073741824]",
		"stream_idle_timeout: 2h0m0s is outside [1s, 1h0m0s]",
		"decision_queue_timeout: 0s is outside [1ms, 1m0s]",
		"decision_concurrency: -1 is outside [0, 1024] (0 = GOMAXPROCS)",
		"log_level: loud must be one of",
		"model.tokenizer: /nonexistent/model must be an existing model directory",
		"tls_cert/tls_key: cert.pem/ must be given together",
		"eff_isl_ratio_threshold: 1.5 is outside [0.0, 1.0]",
		"unknown field(s): polcy",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	// Policy rules that need the whole configuration.
	model := requireModel(t)
	_, err = loadArgs(t, "--tokenizer", model, "--router-conditional-disagg", "--router-mode", "round_robin",
		"--config", writeFile(t, dir, "w.yaml", workersYAML))
	if err == nil || !strings.Contains(err.Error(), `requires --router-mode kv (got "round_robin")`) {
		t.Fatalf("mode rule: %v", err)
	}
	if _, err := loadArgs(t, "--config", writeFile(t, dir, "typo.yaml", "listne: x\n")); err == nil ||
		!strings.Contains(err.Error(), "field listne not found") {
		t.Fatalf("unknown YAML key: %v", err)
	}
}

// TestExampleConfigLoads keeps condisagg.example.yaml valid.
func TestExampleConfigLoads(t *testing.T) {
	requireModel(t)
	c, err := loadArgs(t, "--config", filepath.Join("..", "..", "cmd", "condisagg", "condisagg.example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Settings.Policy.Disagg.Policy != policy.ISLOrLoad || len(c.Pool.Workers) != 2 || !c.KVEvents {
		t.Fatalf("example config: %+v", c.Settings.Policy)
	}
}
