package workload

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// kindDistServe separates the mix's prompt segments from the other generators'.
const kindDistServe uint64 = 96

// MixConfig generates independent single-turn requests (nothing shared, so nothing cached)
// with Poisson arrivals, each drawn from one of two length profiles: the shape of DistServe's
// evaluation (OSDI'24), where chatbot and code-completion traffic with long outputs made
// disaggregation win under a tight TPOT objective.
type MixConfig struct {
	Requests int
	Rate     float64 // req/s
	// ChatShare is the fraction of requests drawn from the chat profile; the rest are code.
	ChatShare             float64
	ChatInput, ChatOutput LogNormal
	CodeInput, CodeOutput LogNormal
}

// DistServeMix is the preset: 6,000 requests at 60 req/s, 70% chat (ShareGPT-like: input
// median ~600 tokens, output median ~350, both long-tailed) and 30% code completion
// (HumanEval-like: input ~160, output ~120). The figures are of that shape, not a trace.
func DistServeMix() MixConfig {
	return MixConfig{Requests: 6000, Rate: 60, ChatShare: 0.7,
		ChatInput: LogNormal{Mu: math.Log(600), Sigma: 0.8, Max: 4000}, ChatOutput: LogNormal{Mu: math.Log(350), Sigma: 0.6, Max: 2000},
		CodeInput: LogNormal{Mu: math.Log(160), Sigma: 0.4, Max: 1000}, CodeOutput: LogNormal{Mu: math.Log(120), Sigma: 0.5, Max: 800}}
}

// Validate returns every problem of c.
func (c MixConfig) Validate() error {
	var errs []error
	if c.Requests < 1 {
		errs = append(errs, fmt.Errorf("requests: %d must be at least 1", c.Requests))
	}
	if !(c.Rate > 0) || math.IsInf(c.Rate, 0) {
		errs = append(errs, fmt.Errorf("rate: %v must be a positive finite req/s", c.Rate))
	}
	if !(c.ChatShare >= 0 && c.ChatShare <= 1) {
		errs = append(errs, fmt.Errorf("chat_share: %v must be in [0, 1]", c.ChatShare))
	}
	for _, l := range []struct {
		f string
		l LogNormal
	}{{"chat_input", c.ChatInput}, {"chat_output", c.ChatOutput}, {"code_input", c.CodeInput}, {"code_output", c.CodeOutput}} {
		if err := l.l.validate(l.f); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Generate returns the workload for seed, in arrival order.
func (c MixConfig) Generate(seed uint64) ([]Request, error) {
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("workload: mix config: %w", err)
	}
	r := newRand(seed, kindDistServe)
	reqs := make([]Request, c.Requests)
	var t float64
	for i := range reqs {
		t += r.ExpFloat64() / c.Rate
		in, out := c.CodeInput, c.CodeOutput
		if r.Float64() < c.ChatShare {
			in, out = c.ChatInput, c.ChatOutput
		}
		isl, osl := in.tokens(r), out.tokens(r)
		reqs[i] = Request{Index: i, Arrival: time.Duration(t * float64(time.Second)), Session: int64(i), Parent: -1,
			InputTokens: isl, OutputTokens: osl,
			Prompt: []Segment{{ID: synthID(seed, kindDistServe, uint64(i), 0), Len: uint32(isl)}},
			Output: []Segment{{ID: synthID(seed, kindOutput, uint64(i), 1), Len: uint32(osl)}}}
	}
	return reqs, nil
}
