package feedback

import (
	"math"
	"sync/atomic"

	"github.com/condisagg/condisagg/policy"
)

// Role-balance advice from the observed mix: how much of the fleet's GPU time the traffic
// routed so far needs for prefill and how much for decode, priced with the slo policy's cost
// model at its objective. Prefill work per request is its uncached prompt (the tokens some
// worker had to compute: PrefillTokens of the decision). Decode work per output token is one
// step at the largest batch that still meets the TPOT objective, divided by that batch. The
// advice is the prefill share of the total and the prefill workers it implies for the fleet's
// size. It is analytic (no queueing), a starting point that `condisagg tune --role-advice`
// checks by simulation.

// mixCounts are the sums the advice reads; atomics, so every decision adds without a lock.
type mixCounts struct {
	requests      atomic.Int64
	promptTokens  atomic.Int64 // ISL
	prefillTokens atomic.Int64 // uncached prompt tokens computed
	outputs       atomic.Int64 // requests whose output length was observed
	outputTokens  atomic.Int64
}

// RoleAdvice is the advice for the fleet behind the router.
type RoleAdvice struct {
	Valid                           bool    // the slo policy's cost model is set and traffic was observed
	PrefillShare                    float64 // of the fleet's GPU time
	PrefillWorkers                  int     // of Workers, at least 1 and at most Workers-1 when Workers >= 2
	Workers                         int     // workers of the first model (both roles)
	PrefillMSPerReq, DecodeMSPerReq float64
}

// routed counts one routed request.
func (x *mixCounts) routed(isl int, prefill int64) {
	x.requests.Add(1)
	x.promptTokens.Add(int64(isl))
	x.prefillTokens.Add(prefill)
}

// output counts the output length of one finished request (the response's usage or its
// token events).
func (x *mixCounts) output(tokens int) {
	if tokens <= 0 {
		return
	}
	x.outputs.Add(1)
	x.outputTokens.Add(int64(tokens))
}

// advice prices the observed mix (see the file comment) for a fleet of workers under cfg.
// Without the slo policy's cost model, or before a request and an output length were
// observed, it is not Valid.
func (x *mixCounts) advice(cfg *policy.Config, workers int) RoleAdvice {
	m := cfg.Disagg.Cost
	out := RoleAdvice{Workers: workers}
	reqs, outs := float64(x.requests.Load()), float64(x.outputs.Load())
	if m.Name == "" || reqs == 0 || outs == 0 || out.Workers == 0 {
		return out
	}
	isl, eff := float64(x.promptTokens.Load())/reqs, float64(x.prefillTokens.Load())/reqs
	osl := float64(x.outputTokens.Load()) / outs
	cachedTok := isl - eff
	// Prefill: one request's uncached suffix with attention over its prefix, chunks of the
	// default budget each paying the fixed step cost.
	steps := math.Max(1, math.Ceil(eff/8192))
	out.PrefillMSPerReq = steps*m.T0 + m.A1*eff + m.A2*eff*(cachedTok+eff/2)
	// Decode: the largest batch whose step meets the TPOT objective at the mean context.
	ctx := isl + osl/2
	tpot := float64(cfg.Disagg.SLO.TPOT) / 1e6
	if tpot <= 0 {
		tpot = float64(policy.DefaultSLOTPOT) / 1e6
	}
	per := m.D1 + m.D2*ctx
	batch := 1.0
	if per > 0 && tpot > m.T0 {
		batch = math.Max(1, math.Floor((tpot-m.T0)/per))
	}
	step := m.T0 + per*batch
	out.DecodeMSPerReq = osl * step / batch
	total := out.PrefillMSPerReq + out.DecodeMSPerReq
	if !(total > 0) {
		return out
	}
	out.Valid = true
	out.PrefillShare = out.PrefillMSPerReq / total
	p := int(math.Round(out.PrefillShare * float64(out.Workers)))
	if out.Workers >= 2 {
		p = min(max(p, 1), out.Workers-1)
	}
	out.PrefillWorkers = p
	return out
}
