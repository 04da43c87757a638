package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/condisagg/condisagg/policy"
	"github.com/condisagg/condisagg/pool"
	"github.com/condisagg/condisagg/pool/kube"
	"github.com/condisagg/condisagg/tokenizer"
)

// defaultCacheSegments is a model's tokenizer segment cache when cache_segments is not given.
const defaultCacheSegments = 65536

// ModelFile is one model in the file: the single-model `model` (its workers are the
// top-level `workers`) or an entry of `models` (with its own `workers`).
type ModelFile struct {
	// Name is the request `model` value of the base model (vLLM --served-model-name).
	// Required in `models`; in the single-model form "" routes every name to the model.
	Name string `yaml:"name"`
	// Tokenizer is the model directory (tokenizer.json, tokenizer_config.json), or a Hugging
	// Face Hub model "hf:<org>/<model>[@revision]" fetched at start into the hub cache
	// (HF_HUB_CACHE or HF_HOME; HF_ENDPOINT, HF_TOKEN; HF_HUB_OFFLINE=1 reads the cache only).
	Tokenizer string `yaml:"tokenizer"`
	// ChatTemplate is a Jinja file that replaces the model directory's template (vLLM
	// --chat-template); "" keeps the directory's.
	ChatTemplate  string `yaml:"chat_template"`
	BlockSize     int    `yaml:"block_size"`
	CacheSegments *int   `yaml:"cache_segments"`
	// MaxModelLen is the engines' --max-model-len (0: unknown). A prompt over it is refused
	// with vLLM's own 400 after as little tokenization as vLLM does.
	MaxModelLen int `yaml:"max_model_len"`
	// LoRAAdapters are the request model names that are LoRA adapters of this model (vLLM
	// --lora-modules names): their prompts are keyed with the adapter, as the engine keys
	// their blocks.
	LoRAAdapters []string `yaml:"lora_adapters"`
	// Speculative is "eagle" when the model's workers are SGLang servers with EAGLE speculative
	// decoding (--speculative-algorithm EAGLE, EAGLE3 or NEXTN): SGLang then keys its radix
	// cache by token bigrams, so a block is cached only with the token after it, and the
	// model's KV index and request keys must do the same. "" or "none": plain keys.
	Speculative string              `yaml:"speculative"`
	Workers     []pool.WorkerConfig `yaml:"workers"`
}

// relativeTo makes the model's relative paths relative to the config file's directory.
func (m *ModelFile) relativeTo(configPath string) {
	for _, p := range []*string{&m.Tokenizer, &m.ChatTemplate} {
		if *p != "" && !filepath.IsAbs(*p) && !strings.HasPrefix(*p, tokenizer.HubPrefix) {
			*p = filepath.Join(filepath.Dir(configPath), *p)
		}
	}
}

// Model is one validated model of `serve`.
type Model struct {
	Name          string // "" : the single unnamed model, which takes every request name
	Tokenizer     string // model directory
	ChatTemplate  string // template file overriding the directory's ("" none)
	CacheSegments int
	MaxModelLen   int // 0: unknown
	LoRAAdapters  []string
	Pool          pool.Config // the model's workers; Pool.BlockSize is the model's block size
	// Discovery are the discovery.kubernetes entries of this model (with defaults).
	Discovery []kube.Entry
}

// normalise turns the single-model form (model + top-level workers) into a one-entry
// Models, so that everything after it sees only the list; it records the form in fc.single
// and reports a file that mixes the two forms. Model and Workers are empty afterwards.
func normalise(fc *File) error {
	var errs []string
	if len(fc.Models) == 0 {
		m := fc.Model
		if len(m.Workers) > 0 {
			errs = append(errs, fmt.Sprintf("config: model.workers: %d workers is only for models[] entries; list them under the top-level workers",
				len(m.Workers)))
		}
		m.Workers = fc.Workers
		fc.Models, fc.single = []ModelFile{m}, true
	} else {
		if len(fc.Workers) > 0 {
			errs = append(errs, fmt.Sprintf("config: workers: %d workers cannot be combined with models; move each worker into its model's models[i].workers",
				len(fc.Workers)))
		}
		if m := fc.Model; m.Name != "" || m.Tokenizer != "" || m.ChatTemplate != "" || len(m.LoRAAdapters) > 0 || len(m.Workers) > 0 {
			errs = append(errs, "config: model: the single-model form cannot be combined with models; move it into a models[] entry")
		}
	}
	fc.Model, fc.Workers = ModelFile{}, nil
	return joinText(errs)
}

// modelPrefixes are the field prefixes of the models in errors: "model" for the
// single-model form, "models[i]" otherwise.
func modelPrefixes(fc *File) []string {
	if fc.single {
		return []string{"model"}
	}
	prefixes := make([]string, len(fc.Models))
	for i := range fc.Models {
		prefixes[i] = "models[" + strconv.Itoa(i) + "]"
	}
	return prefixes
}

func joinText(msgs []string) error {
	if len(msgs) == 0 {
		return nil
	}
	return fmt.Errorf("%s", strings.Join(msgs, "\n"))
}

// withModelDefaults fills block_size (16) and cache_segments (65536) where they are unset.
func withModelDefaults(ms []ModelFile) []ModelFile {
	out := make([]ModelFile, len(ms))
	for i, m := range ms {
		if m.BlockSize == 0 {
			m.BlockSize = policy.DefaultBlockSize
		}
		if m.CacheSegments == nil {
			n := defaultCacheSegments
			m.CacheSegments = &n
		}
		out[i] = m
	}
	return out
}

// buildModels validates every model (field/value/rule errors appended to errs, prefixed by
// the model's field) and returns them. Names, adapter names, worker names and worker
// endpoints are unique across models.
func buildModels(fc File, ms []ModelFile, prefixes []string, disc [][]kube.Entry, errs *[]error) []Model {
	bad := func(field string, value any, rule string) {
		*errs = append(*errs, fmt.Errorf("config: %s: %v %s", field, value, rule))
	}
	named := !fc.single
	names := map[string]string{}     // request model name -> field that claims it
	workers := map[string]string{}   // worker name -> model field
	endpoints := map[string]string{} // worker endpoint -> model field
	var out []Model
	for i, m := range ms {
		f := prefixes[i]
		if named && m.Name == "" {
			bad(f+".name", `""`, "must be the model name requests use (vLLM --served-model-name)")
		}
		claim := func(field, name string) {
			if prev, ok := names[name]; ok {
				bad(field, strconv.Quote(name), "is already "+prev+"; model and adapter names must be unique")
				return
			}
			names[name] = field
		}
		if m.Name != "" {
			claim(f+".name", m.Name)
		}
		for j, a := range m.LoRAAdapters {
			if strings.TrimSpace(a) == "" {
				bad(f+".lora_adapters["+strconv.Itoa(j)+"]", `""`, "must be an adapter name (vLLM --lora-modules NAME=PATH)")
				continue
			}
			claim(f+".lora_adapters["+strconv.Itoa(j)+"]", a)
		}
		checkModelFiles(f, m, named, bad)
		if m.BlockSize < 1 {
			bad(f+".block_size", m.BlockSize, "must be >= 1 (the workers' vLLM --block-size)")
		}
		if m.MaxModelLen < 0 {
			bad(f+".max_model_len", m.MaxModelLen, "must be >= 0 (the workers' vLLM --max-model-len; 0 = unknown)")
		}
		if *m.CacheSegments < 0 {
			bad(f+".cache_segments", *m.CacheSegments, "must be >= 0")
		}
		wf := "workers"
		if named {
			wf = f + ".workers"
		}
		if len(m.Workers) == 0 && len(disc[i]) == 0 {
			bad(wf, "[]", "must list at least one decode worker (or discover workers with discovery.kubernetes)")
		}
		for j, w := range m.Workers {
			wfj := wf + "[" + strconv.Itoa(j) + "]"
			if prev, ok := workers[w.Name]; ok && named && w.Name != "" && prev != f {
				bad(wfj+".name", strconv.Quote(w.Name), "is already a worker of "+prev+"; worker names must be unique across models")
			}
			workers[w.Name] = f
			ep := strings.ToLower(w.Endpoint)
			if prev, ok := endpoints[ep]; ok && named && ep != "" && prev != f {
				bad(wfj+".endpoint", w.Endpoint, "is already a worker of "+prev+"; an engine serves one model, so endpoints must be unique across models")
			}
			endpoints[ep] = f
		}
		spec := checkSpeculative(f, wf, m, bad)
		pc := poolConfig(&fc, m.Workers, m.BlockSize)
		pc.Speculative = spec
		if err := pc.Validate(); err != nil {
			if named {
				err = fmt.Errorf("config: %s: %w", f, err)
			}
			*errs = append(*errs, err)
		}
		out = append(out, Model{Name: m.Name, Tokenizer: m.Tokenizer, ChatTemplate: m.ChatTemplate,
			CacheSegments: *m.CacheSegments, MaxModelLen: m.MaxModelLen, LoRAAdapters: m.LoRAAdapters, Pool: pc, Discovery: disc[i]})
	}
	return out
}

// checkSpeculative checks the model's speculative setting and returns its pool form
// (pool.SpeculativeEagle or ""). EAGLE's bigram keys are SGLang's: vLLM and TRT-LLM key plain
// tokens whatever their speculative decoding, so every listed worker must be engine: sglang.
func checkSpeculative(f, wf string, m ModelFile, bad func(string, any, string)) string {
	switch strings.ToLower(strings.TrimSpace(m.Speculative)) {
	case "", "none":
		return ""
	case pool.SpeculativeEagle:
	default:
		bad(f+".speculative", strconv.Quote(m.Speculative), `must be "eagle" (SGLang --speculative-algorithm EAGLE, EAGLE3 or NEXTN: `+
			`bigram block keys) or "none"`)
		return ""
	}
	for j, w := range m.Workers {
		if w.Engine != pool.EngineSGLang {
			bad(wf+"["+strconv.Itoa(j)+"].engine", strconv.Quote(string(w.Engine)), "must be sglang under "+f+".speculative: eagle "+
				"(the bigram block keys of SGLang's EAGLE; vLLM and TRT-LLM key plain tokens with any speculative decoding: "+
				"serve them as a model without speculative)")
		}
	}
	return pool.SpeculativeEagle
}

// checkModelFiles checks the model's tokenizer directory (or Hub model id) and chat template
// file. A Hub model is only checked for its form here: serve fetches it at start.
func checkModelFiles(f string, m ModelFile, named bool, bad func(string, any, string)) {
	_, _, hub, hubErr := tokenizer.ParseHubModel(m.Tokenizer)
	switch {
	case m.Tokenizer == "":
		rule := "must name a model directory or hf:<org>/<model> (--tokenizer)"
		if named {
			rule = "must name the model's tokenizer directory or hf:<org>/<model>"
		}
		bad(f+".tokenizer", `""`, rule)
	case hub && hubErr != nil:
		bad(f+".tokenizer", m.Tokenizer, "must be hf:<org>/<model>[@revision] (a Hugging Face Hub repository id)")
	case hub:
	default:
		if st, err := os.Stat(m.Tokenizer); err != nil || !st.IsDir() {
			bad(f+".tokenizer", m.Tokenizer, "must be an existing model directory or hf:<org>/<model>")
		}
	}
	if m.ChatTemplate != "" {
		if st, err := os.Stat(m.ChatTemplate); err != nil || st.IsDir() {
			bad(f+".chat_template", m.ChatTemplate, "must be an existing Jinja template file")
		}
	}
}
