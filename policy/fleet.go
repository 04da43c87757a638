package policy

import (
	"math"
	"time"
)

// FleetView is the fleet's recent steady state (package fleet estimates it over a sliding
// window on the router's clock; the server and the simulator hand it in alike). A zero Window
// means no view: too little history, or slo_fleet off.
type FleetView struct {
	Window          time.Duration // the history the rates cover
	Decode, Prefill PoolRates     // by the pool a placement's prefill ran on
}

// PoolRates are one pool's rates over the window, per second.
type PoolRates struct {
	Requests      float64 // placements whose prefill ran on the pool
	PrefillTokens float64 // their uncached prompt tokens
	PrefillPairs  float64 // their attention query-key pairs, Σ n·(cached + n/2)
	OutputTokens  float64 // output tokens the pool decoded (answers ended)
	QueueGrowth   float64 // the pool's booked prefill queue, tokens/s (> 0: a queue is building)
}

// Regime is the steady state of one way of placing the offered load (the fleet's prompt-token
// rate, whatever pool it ran on in the window): Aggregated prefills on every worker and decodes
// where it prefilled; Split prefills on the prefill pool only and decodes on the decode pool.
// The forecasts are this request's, in that steady state.
type Regime struct {
	Valid     bool
	Workers   int     // workers that prefill
	Util      float64 // share of a prefilling worker's time spent on prefill (capped at maxUtil)
	Saturated bool    // the prefill work needs more than the workers have (uncapped Util >= 1)
	WaitMS    float64 // mean wait in a prefill queue (M/D/1 at Util)
	TTFTms    float64
	TPOTms    float64
	Headroom  float64
}

// FleetForecast is what the slo policy made of the fleet view (Inputs.Fleet, Explain).
type FleetForecast struct {
	View              FleetView
	Aggregated, Split Regime
	// DecodeUtil and PrefillUtil are the share of a worker's time each pool spent on prefill in
	// the window (capped at maxUtil): what a decode there shares its steps with now.
	DecodeUtil, PrefillUtil float64
	// OutputPerRequest is the mean output of a placement (output over placement rates): the
	// decode steps over which one prefill's interruption of a worker's decodes is spread.
	OutputPerRequest float64
}

// maxUtil caps a regime's prefill utilisation: past it the queue wait is counted as if at the
// cap (a long but finite wait that the objective then rejects).
const maxUtil = 0.95

// PrefersSplit reports whether the steady state favours splitting: the split regime has more
// headroom than the aggregated one.
func (f *FleetForecast) PrefersSplit() bool {
	return f.Split.Valid && f.Aggregated.Valid && f.Split.Headroom > f.Aggregated.Headroom
}

// steady computes the two regimes from the view in in.Fleet and the snapshot's decodes (the
// running sequences and their context, spread over the regime's decode workers). O(workers).
func (e *estimator) steady(in *Input, snap *Snapshot) FleetForecast {
	v := in.Fleet
	f := FleetForecast{View: v}
	if v.Window <= 0 {
		return f
	}
	np, nd := len(snap.Prefill), len(snap.Decode)
	var seqs, ctx float64
	for i := range snap.Decode {
		seqs += float64(snap.Decode[i].DecodeRequests)
		ctx += float64(snap.Decode[i].ActiveDecodeBlocks)
	}
	for i := range snap.Prefill {
		seqs += float64(snap.Prefill[i].DecodeRequests)
		ctx += float64(snap.Prefill[i].ActiveDecodeBlocks)
	}
	ctx *= float64(e.bs)
	reqs := v.Decode.Requests + v.Prefill.Requests
	if reqs > 0 {
		f.OutputPerRequest = (v.Decode.OutputTokens + v.Prefill.OutputTokens) / reqs
	}
	// work is the prefill compute offered per second, in worker-seconds.
	work := (e.m.A1*(v.Decode.PrefillTokens+v.Prefill.PrefillTokens) + e.m.A2*(v.Decode.PrefillPairs+v.Prefill.PrefillPairs)) / 1000
	if nd > 0 {
		f.DecodeUtil = min((e.m.A1*v.Decode.PrefillTokens+e.m.A2*v.Decode.PrefillPairs)/1000/float64(nd), maxUtil)
	}
	if np > 0 {
		f.PrefillUtil = min((e.m.A1*v.Prefill.PrefillTokens+e.m.A2*v.Prefill.PrefillPairs)/1000/float64(np), maxUtil)
	}
	service := 0.0 // ms of prefill per placement
	if reqs > 0 {
		service = work * 1000 / reqs
	}
	n := float64(e.isl)
	own := e.m.A1*n + e.m.A2*n*n/2 // this request's prefill compute, uncached
	steps := math.Ceil(max(n, 1) / defaultBudget)
	base := func(decoders int) float64 { // one decode step with this request among the regime's decoders
		return e.m.T0 + e.m.D1*(seqs/float64(decoders)+1) + e.m.D2*(ctx/float64(decoders)+n)
	}
	regime := func(prefillers int) Regime {
		raw := work / float64(prefillers)
		r := Regime{Valid: true, Workers: prefillers, Util: min(raw, maxUtil), Saturated: raw >= 1}
		r.WaitMS = r.Util / (2 * (1 - r.Util)) * service
		if r.Saturated {
			// No steady state: the queue grows by (raw − 1) seconds of work every second. Charge
			// what it builds over the window, the horizon the rates were measured on.
			r.WaitMS += (raw - 1) * float64(v.Window) / float64(time.Millisecond)
		}
		return r
	}
	if np+nd > 0 {
		a := regime(np + nd)
		step := base(np + nd)
		a.TPOTms = step / (1 - a.Util)
		a.TTFTms = own + steps*step + a.WaitMS
		a.Headroom = e.headroom(&Estimate{TTFTms: a.TTFTms, TPOTms: a.TPOTms})
		f.Aggregated = a
	}
	if np > 0 && nd > 0 {
		s := regime(np)
		step := base(nd)
		s.TPOTms = step // no prefill lands on the decode pool
		s.TTFTms = own + steps*e.m.T0 + s.WaitMS + ms(e.m.TransferTime(e.isl)) + step
		s.Headroom = e.headroom(&Estimate{TTFTms: s.TTFTms, TPOTms: s.TPOTms})
		f.Split = s
	}
	return f
}

// steadyLocal folds the aggregated regime into a forecast of the whole request on w: the
// request waits the regime's prefill queue, and every decode step there (its own and those of
// the requests already decoding) carries the regime's share of prefill, or the share w's pool
// carries now if that is larger (a prefill pool busy with remote prefills), instead of the one
// chunk of the booked queue that the instant forecast charges to the next step. Its own
// prefill's interruption of w's decodes is spread over a mean output.
func (e *estimator) steadyLocal(est *Estimate, w sloWorker, decodeWorker bool) {
	a := &e.fleet.Aggregated
	if !a.Valid || !est.Valid {
		return
	}
	util := e.fleet.PrefillUtil
	if decodeWorker {
		util = e.fleet.DecodeUtil
	}
	util = max(util, a.Util)
	n := int64(e.isl - min(w.cached, e.isl))
	own := e.ownPrefillMS(w)
	est.TTFTms = max(est.TTFTms, own+a.WaitMS)
	est.TPOTms = max(e.decodeStepMS(w.l, 1, int64(e.isl), 0)/(1-util), a.TPOTms)
	if w.l.DecodeRequests > 0 {
		est.ExistingTPOTms = e.decodeStepMS(w.l, 0, 0, 0)/(1-util) + e.spread(n, w.cached)
	}
	est.Headroom = e.headroom(est)
}

// steadyRemote folds the split regime into a remote forecast: the prefill waits the split
// regime's queue on the prefill pool; the decode worker carries no prefill and (in that regime)
// every running decode of the fleet.
func (e *estimator) steadyRemote(est *Estimate, p, d sloWorker) {
	s := &e.fleet.Split
	if !s.Valid || !est.Valid {
		return
	}
	n := int64(e.isl - min(p.cached, e.isl))
	step := max(e.decodeStepMS(d.l, 1, int64(e.isl), 0), s.TPOTms)
	est.TTFTms = max(est.TTFTms, e.ownPrefillMS(p)+s.WaitMS+ms(e.m.TransferTime(est.TransferTokens))+step)
	est.TPOTms = step
	est.ExistingTPOTms = 0
	if p.l.DecodeRequests > 0 {
		// Decodes on the prefill pool (whole requests placed there) are no part of the split
		// regime: charge them only this prefill's interruption, spread over their output.
		est.ExistingTPOTms = e.decodeStepMS(p.l, 0, 0, 0) + e.spread(n, p.cached)
	}
	if d.l.DecodeRequests > 0 {
		est.ExistingTPOTms = max(est.ExistingTPOTms, e.decodeStepMS(d.l, 0, 0, 0))
	}
	est.Headroom = e.headroom(est)
}

// ownPrefillMS is the request's own prefill on w with nothing queued ahead.
func (e *estimator) ownPrefillMS(w sloWorker) float64 {
	n := int64(e.isl - min(w.cached, e.isl))
	pairs := float64(n) * (float64(w.cached) + float64(n)/2)
	return e.stepOverhead(w.l, n) + e.m.A1*float64(n) + e.m.A2*pairs
}

// spread is the TPOT a prefill of n uncached tokens adds to a decode it interrupts, averaged
// over the decode's remaining output (half a mean output); 0 before any answer was seen.
func (e *estimator) spread(n int64, cached int) float64 {
	if e.fleet.OutputPerRequest <= 0 {
		return 0
	}
	pairs := float64(n) * (float64(cached) + float64(n)/2)
	return (e.m.A1*float64(n) + e.m.A2*pairs) / max(e.fleet.OutputPerRequest/2, 1)
}
