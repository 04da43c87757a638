package config

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/condisagg/condisagg/internal/repo"

	"github.com/condisagg/condisagg/extproc"
	"github.com/condisagg/condisagg/kvevents"
	"github.com/condisagg/condisagg/policy"
	"github.com/condisagg/condisagg/pool"
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
  kv_events_max_message_bytes: 1048576
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
	if len(c.Models[0].Pool.Workers) != 2 || c.Models[0].Pool.BlockSize != 16 {
		t.Fatalf("pool %+v", c.Models[0].Pool)
	}
	if c.KVEventsMaxMessageBytes != 1<<20 {
		t.Fatalf("kv_events_max_message_bytes %d, want 1048576", c.KVEventsMaxMessageBytes)
	}
	// Dynamo's JSON flag replaces the file's object.
	c, err = loadArgs(t, "--config", path, "--router-conditional-disagg-config", `{"policy":"prefill_load"}`)
	if err != nil || c.Settings.Policy.Disagg.Policy != policy.PrefillLoad {
		t.Fatalf("flag JSON: %v %v", c, err)
	}
	// The resource bounds' defaults.
	c, err = loadArgs(t, "--tokenizer", model, "--config", writeFile(t, dir, "w.yaml", workersYAML))
	if err != nil || c.Settings.StreamIdleTimeout != extproc.DefaultStreamIdleTimeout ||
		c.Settings.DecisionQueueTimeout != extproc.DefaultDecisionQueueTimeout || c.DecisionConcurrency != 0 ||
		c.KVEventsMaxMessageBytes != kvevents.DefaultMaxPayloadBytes {
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
  kv_events_max_message_bytes: 1073741824
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
		"router.kv_events_max_message_bytes: 1073741824 is outside [65536, 268435456] (0 = 16777216)",
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
	if c.Settings.Policy.Disagg.Policy != policy.ISLOrLoad || len(c.Models[0].Pool.Workers) != 2 || !c.Router.KVEvents {
		t.Fatalf("example config: %+v", c.Settings.Policy)
	}
}

const modelsYAML = `
unknown_model: passthrough
models:
  - name: qwen3
    tokenizer: QWEN
    block_size: 16
    lora_adapters: [sql-lora]
    workers:
      - {name: q-prefill-0, role: prefill, endpoint: 127.0.0.1:8100}
      - {name: q-decode-0, role: decode, endpoint: 127.0.0.1:8200}
  - name: llama3
    tokenizer: LLAMA
    chat_template: tmpl.jinja
    block_size: 32
    cache_segments: 0
    workers:
      - {name: l-decode-0, role: decode, endpoint: 127.0.0.1:8300}
`

// TestConfigModels: the several-model form gives each model its own tokenizer, chat template
// (relative to the file), block size, adapters and workers; unknown_model is read; the
// single-model form still yields one unnamed model.
func TestConfigModels(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "tmpl.jinja", "{{ messages[0].content }}")
	text := strings.NewReplacer("QWEN", requireModel(t), "LLAMA", repo.TestModel(t, "llama3")).Replace(modelsYAML)
	c, err := loadArgs(t, "--config", writeFile(t, dir, "m.yaml", text))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Models) != 2 || c.UnknownModel != "passthrough" {
		t.Fatalf("models %+v unknown %q", c.Models, c.UnknownModel)
	}
	q, l := c.Models[0], c.Models[1]
	if q.Name != "qwen3" || q.Pool.BlockSize != 16 || len(q.Pool.Workers) != 2 || q.CacheSegments != 65536 ||
		len(q.LoRAAdapters) != 1 || q.ChatTemplate != "" {
		t.Fatalf("qwen3 %+v", q)
	}
	if l.Name != "llama3" || l.Pool.BlockSize != 32 || len(l.Pool.Workers) != 1 || l.CacheSegments != 0 ||
		l.ChatTemplate != filepath.Join(dir, "tmpl.jinja") {
		t.Fatalf("llama3 %+v", l)
	}
	if c.Models[0].Pool.BlockSize != 16 || c.Settings.Policy.BlockSize != 16 || !c.Settings.Policy.DistinctPools {
		t.Fatalf("first model's pool/policy %+v", c.Models[0].Pool)
	}
	// The single-model form: one unnamed model over the top-level workers.
	c, err = loadArgs(t, "--tokenizer", requireModel(t), "--block-size", "32", "--config", writeFile(t, dir, "w.yaml", workersYAML))
	if err != nil || len(c.Models) != 1 || c.Models[0].Name != "" || c.Models[0].Pool.BlockSize != 32 || len(c.Models[0].Pool.Workers) != 2 {
		t.Fatalf("single-model form %+v %v", c, err)
	}
}

// TestConfigModelsValidation: every several-model rule names its field and the fix, all at
// once.
func TestConfigModelsValidation(t *testing.T) {
	dir := t.TempDir()
	model := requireModel(t)
	path := writeFile(t, dir, "bad.yaml", `
unknown_model: forward
model: {tokenizer: `+model+`}
workers:
  - {name: d, role: decode, endpoint: 127.0.0.1:8000}
models:
  - name: qwen3
    tokenizer: `+model+`
    lora_adapters: [llama3, ""]
    workers:
      - {name: d0, role: decode, endpoint: 127.0.0.1:8200}
  - tokenizer: `+model+`
    chat_template: missing.jinja
    block_size: -1
    workers:
      - {name: d0, role: decode, endpoint: 127.0.0.1:8300}
  - name: llama3
    tokenizer: `+model+`
    workers:
      - {name: d9, role: decode, endpoint: 127.0.0.1:8200}
  - name: qwen3
    tokenizer: /nonexistent
    workers: []
  - name: hub-bad
    tokenizer: hf:../etc
    workers:
      - {name: d10, role: decode, endpoint: 127.0.0.1:8400}
  - name: hub-good
    tokenizer: hf:Qwen/Qwen3-8B@main
    workers:
      - {name: d11, role: decode, endpoint: 127.0.0.1:8500}
`)
	_, err := loadArgs(t, "--config", path, "--block-size", "32")
	if err == nil {
		t.Fatal("bad config accepted")
	}
	for _, want := range []string{
		`unknown_model: "forward" must be reject or passthrough`,
		"workers: 1 workers cannot be combined with models; move each worker into its model's models[i].workers",
		"model: the single-model form cannot be combined with models; move it into a models[] entry",
		"--block-size: 32 applies to the single-model form only; set it per model in models[]",
		`models[0].lora_adapters[1]: "" must be an adapter name`,
		`models[1].name: "" must be the model name requests use`,
		"models[1].chat_template: " + filepath.Join(dir, "missing.jinja") + " must be an existing Jinja template file",
		"models[1].block_size: -1 must be >= 1",
		`models[1].workers[0].name: "d0" is already a worker of models[0]; worker names must be unique across models`,
		`models[2].name: "llama3" is already models[0].lora_adapters[0]; model and adapter names must be unique`,
		"models[2].workers[0].endpoint: 127.0.0.1:8200 is already a worker of models[0]",
		`models[3].name: "qwen3" is already models[0].name`,
		"models[3].tokenizer: /nonexistent must be an existing model directory",
		"models[3].workers: [] must list at least one decode worker",
		"models[4].tokenizer: hf:../etc must be hf:<org>/<model>[@revision]",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "models[5]") { // a Hub id is fetched at start, not checked on disk
		t.Errorf("a well-formed Hub model refused:\n%v", err)
	}
	if _, err := loadArgs(t, "--tokenizer", model, "--config", writeFile(t, dir, "mw.yaml",
		"model: {workers: [{name: x, role: decode, endpoint: 127.0.0.1:1}]}\n"+workersYAML)); err == nil ||
		!strings.Contains(err.Error(), "model.workers: 1 workers is only for models[] entries") {
		t.Fatalf("model.workers in the single-model form: %v", err)
	}
}

// TestModelsExampleConfigLoads keeps condisagg.models.example.yaml valid.
func TestModelsExampleConfigLoads(t *testing.T) {
	requireModel(t)
	repo.TestModel(t, "llama3")
	c, err := loadArgs(t, "--config", filepath.Join("..", "..", "cmd", "condisagg", "condisagg.models.example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Models) != 2 || c.Models[1].Pool.BlockSize != 32 || c.UnknownModel != "reject" || len(c.Models[0].LoRAAdapters) != 1 {
		t.Fatalf("models example: %+v", c.Models)
	}
}

// TestDataParallelWorkers: data_parallel_size reaches the pool, and its mistakes are reported
// with the field, the value and the fix (pool README "Data-parallel ranks").
func TestDataParallelWorkers(t *testing.T) {
	model := requireModel(t)
	dir := t.TempDir()
	good := writeFile(t, dir, "dp.yaml", `
model: {tokenizer: `+model+`}
workers:
  - {name: prefill-0, role: prefill, endpoint: 127.0.0.1:8100}
  - {name: decode-0, role: decode, endpoint: 127.0.0.1:8200, data_parallel_size: 2,
     kv_events: "tcp://127.0.0.1:5557", kv_replay: "tcp://127.0.0.1:5567"}
`)
	c, err := loadArgs(t, "--config", good)
	if err != nil {
		t.Fatal(err)
	}
	if c.Models[0].Pool.Workers[1].DataParallelSize != 2 || c.Models[0].Pool.Workers[0].DataParallelSize != 0 {
		t.Fatalf("workers %+v", c.Models[0].Pool.Workers)
	}
	bad := writeFile(t, dir, "dp-bad.yaml", `
model: {tokenizer: `+model+`}
workers:
  - {name: decode-0, role: decode, endpoint: 127.0.0.1:8200, data_parallel_size: 4,
     kv_events: "tcp://127.0.0.1:5557", kv_replay: "tcp://127.0.0.1:5558"}
  - {name: decode-1, role: decode, endpoint: 127.0.0.1:8300, data_parallel_size: -1}
  - {name: decode/2, role: decode, endpoint: 127.0.0.1:8400}
`)
	_, err = loadArgs(t, "--config", bad)
	if err == nil {
		t.Fatal("bad data-parallel config accepted")
	}
	for _, want := range []string{
		`workers[0].kv_replay: "tcp://127.0.0.1:5558" ports 5558-5561 overlap kv_events ports 5557-5560: vLLM offsets both by the data-parallel rank, so use a replay port >= 5561`,
		"workers[1].data_parallel_size: -1 must be in [1, 1024]",
		`workers[2].name: "decode/2" must not contain '@', '/' or spaces`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if _, err := loadArgs(t, "--config", writeFile(t, dir, "dp-type.yaml", `
model: {tokenizer: `+model+`}
workers:
  - {name: d, role: decode, endpoint: 127.0.0.1:8200, data_parallel_size: two}
`)); err == nil || !strings.Contains(err.Error(), "data_parallel_size") && !strings.Contains(err.Error(), "two") {
		t.Fatalf("non-integer data_parallel_size: %v", err)
	}
}

// TestWarmSettings: replicas.warm_* take a peer's host:port, a bounded timeout and byte limit,
// each refused with its field, value and rule; --warm-from overrides the file.
func TestWarmSettings(t *testing.T) {
	dir := t.TempDir()
	model := requireModel(t)
	_, err := loadArgs(t, "--tokenizer", model, "--config", writeFile(t, dir, "bad.yaml", workersYAML+`
replicas: {warm_from: condisagg-admin, warm_timeout: 1h, warm_max_bytes: 10}
`))
	for _, want := range []string{
		`replicas.warm_from: "condisagg-admin" must be host:port`,
		"replicas.warm_timeout: 1h0m0s is outside [1s, 10m0s]",
		"replicas.warm_max_bytes: 10 is outside [1048576, 17179869184]",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	cfg, err := loadArgs(t, "--tokenizer", model, "--warm-from", "10.0.0.5:9003", "--config", writeFile(t, dir, "ok.yaml", workersYAML+`
replicas: {warm_from: "other:9003"}
`))
	if err != nil {
		t.Fatal(err)
	}
	if r := cfg.Replicas; r.WarmFrom != "10.0.0.5:9003" || r.WarmTimeout != DefaultWarmTimeout || r.WarmMaxBytes != DefaultWarmMaxBytes {
		t.Fatalf("replicas = %+v", r)
	}
}

// TestConfigSpeculative: speculative: eagle reaches the model's pool config (and from there the
// index's bigram keys and the /server_info check); a bad value and a non-SGLang worker under it
// are refused with the field and the fix.
func TestConfigSpeculative(t *testing.T) {
	dir := t.TempDir()
	model := requireModel(t)
	c, err := loadArgs(t, "--config", writeFile(t, dir, "ok.yaml", `
model: {tokenizer: `+model+`, speculative: EAGLE}
workers:
  - {name: s0, role: decode, engine: sglang, endpoint: 127.0.0.1:30000}
`))
	if err != nil || c.Models[0].Pool.Speculative != pool.SpeculativeEagle {
		t.Fatalf("speculative: EAGLE gave %+v, %v", c.Models[0].Pool, err)
	}
	c, err = loadArgs(t, "--config", writeFile(t, dir, "none.yaml", `
model: {tokenizer: `+model+`, speculative: none}
workers:
  - {name: d0, role: decode, endpoint: 127.0.0.1:8000}
`))
	if err != nil || c.Models[0].Pool.Speculative != "" {
		t.Fatalf("speculative: none gave %+v, %v", c.Models[0].Pool, err)
	}
	_, err = loadArgs(t, "--config", writeFile(t, dir, "bad.yaml", `
models:
  - name: a
    tokenizer: `+model+`
    speculative: medusa
    workers:
      - {name: s0, role: decode, engine: sglang, endpoint: 127.0.0.1:30000}
  - name: b
    tokenizer: `+model+`
    speculative: eagle
    workers:
      - {name: s1, role: decode, engine: sglang, endpoint: 127.0.0.1:30001}
      - {name: v0, role: decode, endpoint: 127.0.0.1:8000}
`))
	for _, want := range []string{
		`models[0].speculative: "medusa" must be "eagle" (SGLang --speculative-algorithm EAGLE, EAGLE3 or NEXTN: bigram block keys) or "none"`,
		`models[1].workers[1].engine: "" must be sglang under models[1].speculative: eagle`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if err != nil && strings.Contains(err.Error(), "models[1].workers[0]") {
		t.Errorf("the SGLang worker under speculative: eagle was refused:\n%v", err)
	}
}
