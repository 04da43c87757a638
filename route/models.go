package route

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/condisagg/condisagg/fleet"
	"github.com/condisagg/condisagg/kvindex"
	"github.com/condisagg/condisagg/policy"
	"github.com/condisagg/condisagg/pool"
)

// ErrUnknownModel is matched (errors.Is) by the error of a request whose `model` names no
// configured model or adapter while Options.UnknownModel is UnknownReject (404).
var ErrUnknownModel = errors.New("unknown model")

// UnknownModelError is the refusal of a request for a model the router does not serve. Its
// text is vLLM's answer for a model the engine does not serve.
type UnknownModelError struct{ Model string }

func (e *UnknownModelError) Error() string { return "The model `" + e.Model + "` does not exist." }

// Is makes errors.Is(err, ErrUnknownModel) true.
func (e *UnknownModelError) Is(target error) bool { return target == ErrUnknownModel }

// UnknownModel is what Decide does with a request whose `model` names no configured model or
// adapter (serve's `unknown_model`).
type UnknownModel uint8

const (
	// UnknownReject refuses the request with an *UnknownModelError (extproc: 404).
	UnknownReject UnknownModel = iota
	// UnknownPassthrough routes it like a passthrough request (Fallback, reason passthrough:
	// by load, no cache credit) to the decode workers of the model whose least-loaded decode
	// worker is the least loaded (the first model on a tie) and marks the outcome
	// UnknownModel, so the engine answers for the name and the router counts it.
	UnknownPassthrough
)

// String returns the config value: "reject" or "passthrough".
func (u UnknownModel) String() string {
	if u == UnknownPassthrough {
		return "passthrough"
	}
	return "reject"
}

// ParseUnknownModel parses "reject" or "passthrough".
func ParseUnknownModel(s string) (UnknownModel, error) {
	switch s {
	case "reject":
		return UnknownReject, nil
	case "passthrough":
		return UnknownPassthrough, nil
	}
	return 0, fmt.Errorf("route: unknown_model: %q must be reject or passthrough", s)
}

// Model is one model a Router serves: its own tokenizer, block size, prefix index, workers
// and event streams. Each model's pipeline is the same Decide; only the collaborators differ.
type Model struct {
	// Name is the request `model` value of the base model (vLLM's served model name). ""
	// makes this model the catch-all of a one-model router: every name that is not one of
	// its adapters routes to the base model (the single-model form of serve's config).
	Name string
	// LoRAAdapters are the request `model` names that are LoRA adapters of this model (vLLM
	// --lora-modules names): their blocks are keyed with the adapter's identity, as vLLM keys
	// them (vllm-kv-events.md §4.1).
	LoRAAdapters []string
	Tokenizer    Tokenizer      // nil: only requests that carry Tokens can be routed
	Index        *kvindex.Index // required; its block size is the model's
	Pool         *pool.Pool     // required
	Streams      EventStreams   // nil: every stream counts as live
	// BlockSize is the model's KV block size in tokens; 0 takes Options.Policy.BlockSize.
	BlockSize int
	// MaxModelLen is the engines' max_model_len (0: unknown). A prompt over it is refused as
	// vLLM refuses it (*tokenizer.LengthError), after as little tokenization as vLLM does.
	MaxModelLen int
}

// ModelInfo describes one served model (Admin, /readyz).
type ModelInfo struct {
	Name         string // "" for the catch-all model of a one-model router
	LoRAAdapters []string
	BlockSize    int
	Pool         *pool.Pool
	Index        *kvindex.Index
}

// model is one Model at run time.
type model struct {
	name      string
	adapters  []string
	tok       Tokenizer
	index     *kvindex.Index
	pool      *pool.Pool
	streams   EventStreams
	blockSize int // 0: the router policy's
	maxLen    int // max_model_len, 0: unknown
	// policy is the router's policy config with this model's block size (swapped by SetPolicy).
	policy atomic.Pointer[policy.Config]
	// fleet is the model's steady-state view for the slo policy's slo_fleet (fleet.go).
	fleet *fleet.Estimator
}

// target is what a request `model` name routes to: a model, and the adapter's key identity
// (nil for the base model).
type target struct {
	m        *model
	lora     []byte
	loraName string // the adapter's name ("" for the base model)
}

// buildModels checks the models of opts and indexes their names; a router built from the
// single-model fields (Tokenizer, Index, Pool, Streams, LoRAAdapters) has one catch-all model.
func buildModels(opts *Options) ([]*model, map[string]target, error) {
	specs := opts.Models
	if len(specs) == 0 {
		specs = []Model{{Tokenizer: opts.Tokenizer, Index: opts.Index, Pool: opts.Pool, Streams: opts.Streams,
			LoRAAdapters: opts.LoRAAdapters}}
	} else if opts.Index != nil || opts.Pool != nil || opts.Tokenizer != nil || len(opts.LoRAAdapters) > 0 {
		return nil, nil, errors.New("route: Models and the single-model fields (Tokenizer, Index, Pool, LoRAAdapters) are exclusive")
	}
	var errs []error
	models := make([]*model, 0, len(specs))
	names := map[string]target{}
	claim := func(name string, t target, what string) {
		if prev, ok := names[name]; ok {
			errs = append(errs, fmt.Errorf("route: model name %q is both %s and a name of model %q", name, what, prev.m.name))
			return
		}
		names[name] = t
	}
	for i, s := range specs {
		if s.Index == nil || s.Pool == nil {
			errs = append(errs, fmt.Errorf("route: model %d (%q): Index and Pool are required", i, s.Name))
			continue
		}
		if s.Name == "" && len(specs) > 1 {
			errs = append(errs, fmt.Errorf("route: model %d: Name is required when the router serves %d models", i, len(specs)))
		}
		if s.BlockSize < 0 {
			errs = append(errs, fmt.Errorf("route: model %q: BlockSize %d must be >= 0", s.Name, s.BlockSize))
		}
		if s.MaxModelLen < 0 {
			errs = append(errs, fmt.Errorf("route: model %q: MaxModelLen %d must be >= 0", s.Name, s.MaxModelLen))
		}
		m := &model{name: s.Name, adapters: append([]string(nil), s.LoRAAdapters...), tok: s.Tokenizer,
			index: s.Index, pool: s.Pool, streams: s.Streams, blockSize: s.BlockSize, maxLen: s.MaxModelLen,
			fleet: fleet.New(fleet.DefaultWindow)}
		models = append(models, m)
		if s.Name != "" {
			claim(s.Name, target{m: m}, "a model")
		}
		for _, a := range s.LoRAAdapters {
			if strings.TrimSpace(a) == "" {
				errs = append(errs, fmt.Errorf("route: model %q: empty LoRA adapter name", s.Name))
				continue
			}
			claim(a, target{m: m, lora: []byte(a), loraName: a}, fmt.Sprintf("an adapter of model %q", s.Name))
		}
	}
	return models, names, errors.Join(errs...)
}

// resolve returns the model and adapter a request `model` name routes to; ok is false for a
// name no model serves. A one-model router with an unnamed model routes every other name to
// its base model.
func (r *Router) resolve(name string) (target, bool) {
	if t, ok := r.names[name]; ok {
		return t, true
	}
	if len(r.models) == 1 && r.models[0].name == "" {
		return target{m: r.models[0]}, true
	}
	return target{}, false
}

// setModelPolicies stores c on every model, copied with the model's block size where it
// differs.
func (r *Router) setModelPolicies(c *policy.Config) {
	for _, m := range r.models {
		if m.blockSize == 0 || m.blockSize == c.BlockSize {
			m.policy.Store(c)
			continue
		}
		mc := *c
		mc.BlockSize = m.blockSize
		m.policy.Store(&mc)
	}
}

// Models describes the served models in configuration order.
func (r *Router) Models() []ModelInfo {
	out := make([]ModelInfo, 0, len(r.models))
	for _, m := range r.models {
		out = append(out, ModelInfo{Name: m.name, LoRAAdapters: m.adapters, BlockSize: m.policy.Load().BlockSize,
			Pool: m.pool, Index: m.index})
	}
	return out
}
