package workload

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/condisagg/condisagg/internal/splitmix"
)

// Synthetic streams live in [2^62, 2^63): clear of trace hash ids and of output streams.
const synthNamespace = uint64(1) << 62

// Stream kinds, mixed into synthetic stream ids.
const (
	kindPrefix uint64 = iota + 1
	kindQuestion
	kindOutput
	kindGlobal
	kindGroup
	kindSession
)

// synthID is the stream id of (kind, a, b) under seed.
func synthID(seed, kind, a, b uint64) uint64 {
	h := splitmix.Mix64(seed ^ kind*0xD6E8FEB86659FD93)
	h = splitmix.Mix64(h ^ a)
	h = splitmix.Mix64(h ^ b)
	return synthNamespace | h>>2
}

// newRand is the generator's random source for (seed, stream).
func newRand(seed, stream uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, splitmix.Mix64(stream)))
}

// LogNormal is a log-normal distribution of exp(N(Mu, Sigma²)), capped at Max (0: no cap).
type LogNormal struct {
	Mu, Sigma float64
	Max       float64
}

func (l LogNormal) sample(r *rand.Rand) float64 {
	v := math.Exp(l.Mu + l.Sigma*r.NormFloat64())
	if l.Max > 0 && v > l.Max {
		v = l.Max
	}
	return v
}

func (l LogNormal) tokens(r *rand.Rand) int { return max(1, int(math.Round(l.sample(r)))) }

func (l LogNormal) validate(field string) error {
	if math.IsNaN(l.Mu) || math.IsInf(l.Mu, 0) || !(l.Sigma >= 0) || math.IsInf(l.Sigma, 0) || !(l.Max >= 0) {
		return fmt.Errorf("%s: {mu: %v, sigma: %v, max: %v} must have finite mu, sigma >= 0 and max >= 0", field, l.Mu, l.Sigma, l.Max)
	}
	return nil
}

// SharedPrefixConfig generates single-turn requests whose prompts are a per-group shared
// prefix followed by a per-request question, with Poisson arrivals. It covers SGLang's
// generated-shared-prefix, vLLM's prefix_repetition and the llm-d B2B benchmark (presets below).
type SharedPrefixConfig struct {
	Groups         int // distinct shared prefixes (customers, system prompts)
	UsersPerGroup  int // sessions per group; a request's Session is group·UsersPerGroup+user
	PrefixTokens   int
	QuestionTokens int // per-request unique suffix
	OutputTokens   int
	Requests       int
	// Rate is the arrival rate (req/s) of the first request; with RateEnd > 0 the rate ramps
	// linearly over the requests to RateEnd (llm-d's "Poisson, ramp 3 -> 60 QPS").
	Rate, RateEnd float64
}

// SGLangSharedPrefix is SGLang bench_serving generated-shared-prefix's defaults: 64 groups ×
// 16 prompts, 2,048-token system prompt, 128-token question, 256 output tokens, at 8 req/s.
func SGLangSharedPrefix() SharedPrefixConfig {
	return SharedPrefixConfig{Groups: 64, UsersPerGroup: 1, PrefixTokens: 2048, QuestionTokens: 128, OutputTokens: 256, Requests: 64 * 16, Rate: 8}
}

// VLLMPrefixRepetition is vLLM bench serve prefix_repetition's defaults: 10 prefixes of 256
// tokens, 256-token suffixes, 128 output tokens; 1,000 prompts at 10 req/s.
func VLLMPrefixRepetition() SharedPrefixConfig {
	return SharedPrefixConfig{Groups: 10, UsersPerGroup: 1, PrefixTokens: 256, QuestionTokens: 256, OutputTokens: 128, Requests: 1000, Rate: 10}
}

// LLMDB2B is the llm-d precise-prefix B2B benchmark: 150 customers × 6,000-token context,
// 5 users each, 1,200-token questions, Poisson ramp 3 -> 60 QPS. The output length is not
// published; 500 tokens is our choice.
func LLMDB2B() SharedPrefixConfig {
	return SharedPrefixConfig{Groups: 150, UsersPerGroup: 5, PrefixTokens: 6000, QuestionTokens: 1200, OutputTokens: 500, Requests: 6000, Rate: 3, RateEnd: 60}
}

// Validate returns every problem of c in the field/value/rule form.
func (c SharedPrefixConfig) Validate() error {
	var errs []error
	positive := func(field string, v int) {
		if v < 1 {
			errs = append(errs, fmt.Errorf("%s: %d must be at least 1", field, v))
		}
	}
	positive("groups", c.Groups)
	positive("users_per_group", c.UsersPerGroup)
	positive("requests", c.Requests)
	if c.PrefixTokens < 0 || c.QuestionTokens < 0 || c.PrefixTokens+c.QuestionTokens < 1 {
		errs = append(errs, fmt.Errorf("prefix_tokens+question_tokens: %d+%d must be non-negative with a positive sum", c.PrefixTokens, c.QuestionTokens))
	}
	if c.OutputTokens < 0 {
		errs = append(errs, fmt.Errorf("output_tokens: %d must be non-negative", c.OutputTokens))
	}
	if !(c.Rate > 0) || math.IsInf(c.Rate, 0) {
		errs = append(errs, fmt.Errorf("rate: %v must be a positive finite req/s", c.Rate))
	}
	if c.RateEnd < 0 || math.IsNaN(c.RateEnd) || math.IsInf(c.RateEnd, 0) {
		errs = append(errs, fmt.Errorf("rate_end: %v must be 0 (constant rate) or a positive finite req/s", c.RateEnd))
	}
	return errors.Join(errs...)
}

// Generate returns the workload for seed, in arrival order; the same seed gives the same
// requests and tokens.
func (c SharedPrefixConfig) Generate(seed uint64) ([]Request, error) {
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("workload: shared-prefix config: %w", err)
	}
	r := newRand(seed, kindPrefix)
	reqs := make([]Request, c.Requests)
	turns := make(map[int64]int)
	var t float64 // seconds
	for i := range reqs {
		rate := c.Rate
		if c.RateEnd > 0 && c.Requests > 1 {
			rate += (c.RateEnd - c.Rate) * float64(i) / float64(c.Requests-1)
		}
		t += r.ExpFloat64() / rate
		g, u := r.IntN(c.Groups), r.IntN(c.UsersPerGroup)
		sess := int64(g*c.UsersPerGroup + u)
		var prompt []Segment
		if c.PrefixTokens > 0 {
			prompt = append(prompt, Segment{ID: synthID(seed, kindPrefix, uint64(g), 0), Len: uint32(c.PrefixTokens)})
		}
		if c.QuestionTokens > 0 {
			prompt = append(prompt, Segment{ID: synthID(seed, kindQuestion, uint64(i), 0), Len: uint32(c.QuestionTokens)})
		}
		reqs[i] = Request{
			Index: i, Arrival: time.Duration(t * float64(time.Second)),
			Session: sess, Turn: turns[sess], Parent: -1,
			InputTokens: c.PrefixTokens + c.QuestionTokens, OutputTokens: c.OutputTokens,
			Prompt: prompt,
		}
		if c.OutputTokens > 0 {
			reqs[i].Output = []Segment{{ID: synthID(seed, kindOutput, uint64(i), 0), Len: uint32(c.OutputTokens)}}
		}
		turns[sess]++
	}
	return reqs, nil
}

// sortByArrival orders reqs by (Arrival, Session, Turn), renumbers Index and remaps Parent.
func sortByArrival(reqs []Request) {
	slices.SortStableFunc(reqs, func(a, b Request) int {
		if a.Arrival != b.Arrival {
			return cmpInt(int64(a.Arrival), int64(b.Arrival))
		}
		if a.Session != b.Session {
			return cmpInt(a.Session, b.Session)
		}
		return cmpInt(int64(a.Turn), int64(b.Turn))
	})
	newIndex := make([]int, len(reqs))
	for i := range reqs {
		newIndex[reqs[i].Index] = i
	}
	for i := range reqs {
		reqs[i].Index = i
		if reqs[i].Parent >= 0 {
			reqs[i].Parent = newIndex[reqs[i].Parent]
		}
	}
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// SyntheticNames lists the generator presets Synthetic knows.
func SyntheticNames() []string {
	return []string{"agentic-code", "distserve-mix", "llm-d-b2b", "sglang-shared-prefix", "vllm-prefix-repetition"}
}

// Synthetic generates the named preset workload for seed (see SyntheticNames).
func Synthetic(name string, seed uint64) ([]Request, error) {
	switch name {
	case "agentic-code":
		return AgenticCode().Generate(seed)
	case "llm-d-b2b":
		return LLMDB2B().Generate(seed)
	case "distserve-mix":
		return DistServeMix().Generate(seed)
	case "sglang-shared-prefix":
		return SGLangSharedPrefix().Generate(seed)
	case "vllm-prefix-repetition":
		return VLLMPrefixRepetition().Generate(seed)
	}
	return nil, fmt.Errorf("workload: synthetic workload %q is not one of %v", name, SyntheticNames())
}
