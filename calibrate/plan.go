package calibrate

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// Kind is what a probe measures.
type Kind uint8

const (
	// Prefill is one isolated prompt on an idle engine; its TTFT is the prefill steps.
	Prefill Kind = iota + 1
	// Decode is Batch concurrent streams; their inter-token gaps are pure decode steps.
	Decode
	// Mixed is one fresh prompt of ISL tokens sent beside Batch running decode streams: the
	// streams' gap at the step that prefilled it is t0 + a1·N + a2·N²/2 + d1·B + d2·ΣC, measured
	// inside the engine, free of the request's own handling.
	Mixed
	// Transfer is one fresh prompt of ISL tokens sent through a P/D pair (pd-sidecar: prefill
	// at P, the KV pulled by D): D's own transfer metrics give its time and bytes.
	Transfer
)

// MixedStreams is the number of background decode streams of a Mixed probe.
const MixedStreams = 2

// mixedOutTokens is the background streams' output length: the prompt goes in after
// mixedLead of their tokens, and the rest covers its step and a few after.
const mixedOutTokens, mixedLead = 64, 8

func (k Kind) String() string {
	switch k {
	case Prefill:
		return "prefill"
	case Decode:
		return "decode"
	case Mixed:
		return "mixed"
	case Transfer:
		return "transfer"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Probe is one measurement the driver makes: Batch requests of ISL fresh prompt tokens each,
// sent together, each asking for OutTokens output tokens.
type Probe struct {
	Kind      Kind
	ISL       int
	Batch     int
	OutTokens int
}

// Requests is the number of requests the probe sends.
func (p Probe) Requests() int { return p.Batch }

// PrefillTokens is the prompt work the probe puts on the engine.
func (p Probe) PrefillTokens() int { return p.Batch * p.ISL }

// PlanConfig bounds the sweep by what the engine can hold. Zero fields take the defaults of
// withDefaults.
type PlanConfig struct {
	MaxModelLen         int // the engine's max_model_len (prompt + output)
	KVTokens            int // the engine's KV capacity in tokens (num_gpu_blocks × block_size)
	MaxNumBatchedTokens int // the engine's token budget per step (chunks longer prompts)

	MaxISL           int // longest prefill probe (default MaxModelLen − 1)
	MinISL           int // shortest prefill probe (default 32)
	PrefillPoints    int // prompt lengths, geometric from MinISL to MaxISL (default 8)
	Repeats          int // times each prefill length is measured (default 2)
	MaxBatch         int // most concurrent decode streams (default 32)
	DecodeOutTokens  int // output tokens per decode stream (default 64)
	DecodePromptWork int // most prompt tokens one decode probe may send (default 4·mnbt)
}

func (c PlanConfig) withDefaults() PlanConfig {
	if c.MaxISL == 0 {
		c.MaxISL = c.MaxModelLen - 1
	}
	if c.MinISL == 0 {
		c.MinISL = 32
	}
	if c.PrefillPoints == 0 {
		c.PrefillPoints = 8
	}
	if c.Repeats == 0 {
		c.Repeats = 2
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = 32
	}
	if c.DecodeOutTokens == 0 {
		c.DecodeOutTokens = 64
	}
	if c.DecodePromptWork == 0 {
		c.DecodePromptWork = 4 * c.MaxNumBatchedTokens
	}
	return c
}

// Validate reports every field that makes no sweep possible.
func (c PlanConfig) Validate() error {
	c = c.withDefaults()
	var errs []error
	bad := func(field string, v int, rule string) {
		errs = append(errs, fmt.Errorf("calibrate: %s: %d %s", field, v, rule))
	}
	if c.MaxModelLen < 64 {
		bad("max_model_len", c.MaxModelLen, "must be >= 64")
	}
	if c.KVTokens < 256 {
		bad("KV capacity (tokens)", c.KVTokens, "must be >= 256")
	}
	if c.MaxNumBatchedTokens < 16 {
		bad("max_num_batched_tokens", c.MaxNumBatchedTokens, "must be >= 16")
	}
	if c.MinISL < 1 || c.MaxISL < 4*c.MinISL {
		bad("max ISL", c.MaxISL, fmt.Sprintf("must be >= 4 × the shortest prompt (%d)", c.MinISL))
	}
	if c.MaxISL >= c.MaxModelLen {
		bad("max ISL", c.MaxISL, fmt.Sprintf("must be < max_model_len %d", c.MaxModelLen))
	}
	if c.PrefillPoints < 3 {
		bad("prefill points", c.PrefillPoints, "must be >= 3 (three terms: t0, a1, a2)")
	}
	if c.Repeats < 1 {
		bad("repeats", c.Repeats, "must be >= 1")
	}
	if c.MaxBatch < 2 {
		bad("max batch", c.MaxBatch, "must be >= 2 (d1 is the cost of one more sequence)")
	}
	if c.DecodeOutTokens < 16 {
		bad("decode output tokens", c.DecodeOutTokens, "must be >= 16")
	}
	return errors.Join(errs...)
}

// Plan designs the sweep: Repeats rounds of isolated prefills over PrefillPoints prompt lengths
// (geometric, so both the linear a1 and the quadratic a2 term show), Repeats rounds of the same
// lengths as Mixed probes (those that fit one step's budget), then decode probes over
// batch size × context length, every one fitting in half the KV cache (no preemption) and in
// the prompt work bound.
func Plan(c PlanConfig) ([]Probe, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	c = c.withDefaults()
	var probes []Probe
	isls := geometric(c.MinISL, min(c.MaxISL, c.KVTokens/2), c.PrefillPoints)
	for range c.Repeats {
		for _, n := range isls {
			probes = append(probes, Probe{Kind: Prefill, ISL: n, Batch: 1, OutTokens: 1})
		}
	}
	// Mixed probes: the same lengths beside running decodes, each prefilled in one step, and the
	// longest prompt one step takes, where the attention term shows most.
	longest := min(c.MaxNumBatchedTokens-MixedStreams, isls[len(isls)-1], c.KVTokens/2-MixedStreams*(64+mixedOutTokens))
	var mixed []int
	for _, n := range isls {
		if n < longest {
			mixed = append(mixed, n)
		}
	}
	if longest > 0 {
		mixed = append(mixed, longest)
	}
	for range c.Repeats {
		for _, n := range mixed {
			probes = append(probes, Probe{Kind: Mixed, ISL: n, Batch: MixedStreams, OutTokens: mixedOutTokens})
		}
	}
	out := c.DecodeOutTokens
	var decodes []Probe
	for _, b := range geometric(1, c.MaxBatch, 4) {
		for _, ctx := range []int{64, 512, 2048, 8192} {
			ctx = min(ctx, c.MaxModelLen-out-1)
			p := Probe{Kind: Decode, ISL: ctx, Batch: b, OutTokens: out}
			if ctx < 16 || b*(ctx+out) > c.KVTokens/2 || p.PrefillTokens() > c.DecodePromptWork ||
				slices.Contains(decodes, p) {
				continue
			}
			decodes = append(decodes, p)
		}
	}
	if batches := distinct(decodes, func(p Probe) int { return p.Batch }); batches < 2 || len(decodes) < 3 {
		return nil, fmt.Errorf("calibrate: the engine's KV capacity (%d tokens) and the prompt work bound (%d tokens) leave %d decode probes over %d batch sizes; want >= 3 over >= 2",
			c.KVTokens, c.DecodePromptWork, len(decodes), batches)
	}
	return append(probes, decodes...), nil
}

// geometric returns up to n distinct integers from lo to hi, evenly spaced on a log scale.
func geometric(lo, hi, n int) []int {
	if hi <= lo || n < 2 {
		return []int{lo}
	}
	var out []int
	r := math.Log(float64(hi) / float64(lo))
	for i := range n {
		v := int(math.Round(float64(lo) * math.Exp(r*float64(i)/float64(n-1))))
		if len(out) == 0 || v > out[len(out)-1] {
			out = append(out, v)
		}
	}
	return out
}

func distinct(ps []Probe, key func(Probe) int) int {
	seen := map[int]bool{}
	for _, p := range ps {
		seen[key(p)] = true
	}
	return len(seen)
}
