// Package cost is the calibrated step-time and KV-transfer model of one LLM on one GPU type
// (perf-model.md §1, §2, §4): the simulator's engines advance their clocks with it and the slo
// policy estimates TTFT and TPOT with it, so both read the same coefficients. Pure: no I/O.
package cost

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Model holds the calibrated step-time and KV-transfer coefficients of one model on one GPU
// type (perf-model.md §1, §2, §4). Times are in milliseconds.
type Model struct {
	Name string
	T0   float64 // fixed cost per step (ms)
	A1   float64 // per prefill token (ms/token)
	A2   float64 // per prefill query-key pair (ms/pair)
	D1   float64 // per decode sequence (ms/seq)
	D2   float64 // per decode context token read (ms/token)

	BytesPerToken float64 // KV bytes per token moved by a transfer (all TP shards)
	XferAlphaMS   float64 // fixed transfer latency (ms)
	XferGBps      float64 // effective transfer bandwidth (GB/s, 10^9 B)
	NumGPUBlocks  int     // default KV capacity in 16-token blocks
}

// StepShape is what one scheduler step computes: prefill chunks (ΣNᵢ tokens and
// ΣNᵢ·(Pᵢ + Nᵢ/2) query-key pairs) and decode sequences (B and ΣCⱼ context tokens).
type StepShape struct {
	PrefillTokens  int
	PrefillPairs   float64
	DecodeSeqs     int
	DecodeContexts int
}

// Empty reports whether the step computes nothing.
func (s StepShape) Empty() bool { return s.PrefillTokens == 0 && s.DecodeSeqs == 0 }

// StepMS is t_step = t0 + a1·ΣN + a2·ΣN(P+N/2) + d1·B + d2·ΣC in milliseconds; an empty step
// costs 0.
func (m Model) StepMS(s StepShape) float64 {
	if s.Empty() {
		return 0
	}
	return m.T0 + m.A1*float64(s.PrefillTokens) + m.A2*s.PrefillPairs +
		m.D1*float64(s.DecodeSeqs) + m.D2*float64(s.DecodeContexts)
}

// StepTime is StepMS as a duration, rounded to the nanosecond.
func (m Model) StepTime(s StepShape) time.Duration { return msDuration(m.StepMS(s)) }

// TransferTime is t_xfer = α + bytes/BW for the KV of tokens tokens (perf-model.md §4); 0 tokens
// cost nothing.
func (m Model) TransferTime(tokens int) time.Duration {
	if tokens <= 0 {
		return 0
	}
	ms := m.XferAlphaMS
	if m.XferGBps > 0 {
		ms += float64(tokens) * m.BytesPerToken / (m.XferGBps * 1e9) * 1e3
	}
	return msDuration(ms)
}

func msDuration(ms float64) time.Duration { return time.Duration(math.Round(ms * 1e6)) }

// Validate reports every coefficient that is negative or not finite.
func (m Model) Validate() error {
	var bad []string
	for _, f := range []struct {
		name string
		v    float64
	}{{"t0", m.T0}, {"a1", m.A1}, {"a2", m.A2}, {"d1", m.D1}, {"d2", m.D2},
		{"bytes_per_token", m.BytesPerToken}, {"xfer_alpha_ms", m.XferAlphaMS}, {"xfer_gbps", m.XferGBps}} {
		if f.v < 0 || math.IsNaN(f.v) || math.IsInf(f.v, 0) {
			bad = append(bad, fmt.Sprintf("%s: %v is not a finite value >= 0", f.name, f.v))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("cost: model %q: %s", m.Name, strings.Join(bad, "; "))
	}
	return nil
}

// perfModels are the columns of perf-model.md §2 (BF16, vLLM v1, block size 16), with the KV
// transfer planning values of §4 (one 400 Gb/s NIC per GPU: 40 GB/s; TP4 moves four shards).
var perfModels = []Model{
	{Name: "llama3.1-8b-h100", T0: 6.5, A1: 0.021, A2: 1.0e-6, D1: 0.03, D2: 4.9e-5,
		BytesPerToken: 131072, XferAlphaMS: 0.5, XferGBps: 40, NumGPUBlocks: 29205},
	{Name: "llama3.1-8b-h200", T0: 4.7, A1: 0.020, A2: 1.0e-6, D1: 0.03, D2: 3.4e-5,
		BytesPerToken: 131072, XferAlphaMS: 0.5, XferGBps: 40, NumGPUBlocks: 54000},
	{Name: "llama3.1-70b-h100-tp4", T0: 15, A1: 0.060, A2: 1.6e-6, D1: 0.05, D2: 3.1e-5,
		BytesPerToken: 327680, XferAlphaMS: 0.5, XferGBps: 160, NumGPUBlocks: 29000},
	{Name: "llama3.1-70b-h200-tp4", T0: 11, A1: 0.058, A2: 1.6e-6, D1: 0.05, D2: 2.1e-5,
		BytesPerToken: 327680, XferAlphaMS: 0.5, XferGBps: 160, NumGPUBlocks: 75000},
}

// Names lists the names ByName accepts.
func Names() []string {
	names := make([]string, len(perfModels))
	for i, m := range perfModels {
		names[i] = m.Name
	}
	return names
}

// ByName returns the calibrated coefficients named name (see Names).
func ByName(name string) (Model, error) {
	i := slices.IndexFunc(perfModels, func(m Model) bool { return m.Name == name })
	if i < 0 {
		return Model{}, fmt.Errorf("cost: perf model %q: unknown, want one of %s", name, strings.Join(Names(), ", "))
	}
	return perfModels[i], nil
}
