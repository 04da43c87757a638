package policy

import (
	"math"
	"math/rand/v2"
	"time"

	"github.com/condisagg/condisagg/cost"
)

// SLO is a latency objective: time to first token and time per output token. A zero field
// takes the configured value (Disagg.SLO).
type SLO struct {
	TTFT, TPOT time.Duration
}

// Default objectives of the slo policy (the 8B set of perf-model.md), and the bound of its
// feedback corrections.
const (
	DefaultSLOTTFT        = 2 * time.Second
	DefaultSLOTPOT        = 100 * time.Millisecond
	DefaultSLOFeedbackMax = 8.0
	MaxSLOFeedbackMax     = 100.0
	// DefaultSLOMargin is slo_margin: the headroom (share of the objective) every placement
	// must keep for the slo policy to stop maximising headroom and place the request by
	// aggregated cost instead. Chosen on the evaluation matrix (docs/results.md, "The margin"):
	// 0.15 has the highest geometric mean of the four margins swept and no cell below 0.84x.
	DefaultSLOMargin = 0.15
)

// Correction multiplies the cost model's TTFT and TPOT forecasts of one placement: the
// closed-loop feedback of route (observed / predicted, smoothed and bounded). 0 means 1.
type Correction struct {
	TTFT, TPOT float64
}

func (c Correction) factors() (ttft, tpot float64) {
	ttft, tpot = c.TTFT, c.TPOT
	if ttft <= 0 {
		ttft = 1
	}
	if tpot <= 0 {
		tpot = 1
	}
	return ttft, tpot
}

// Estimate is the slo policy's forecast for one placement on its best worker(s), in
// milliseconds: the request's TTFT and TPOT, and the worst TPOT it imposes on requests already
// decoding where it lands. Headroom is the smallest remaining fraction of the SLO over the three
// (1 = free, 0 = exactly at the SLO, < 0 = a violation); Valid is false when the placement has
// no eligible worker.
type Estimate struct {
	Valid            bool
	Prefill, Decode  string // workers (Prefill "" for a bypass, Decode "" for prefill_local)
	TTFTms, TPOTms   float64
	ExistingTPOTms   float64 // 0 when nothing else decodes there
	Headroom         float64
	CachedTokens     int // tokens the prefilling worker holds
	TransferTokens   int // remote: the uncached suffix the decode worker pulls
	PrefillQueueToks int64
	// TTFTFactor and TPOTFactor are the feedback corrections applied (1 without feedback).
	TTFTFactor, TPOTFactor float64
}

// sloWorker is one worker's state as the estimator reads it.
type sloWorker struct {
	l      *WorkerLoad
	cached int
}

// decideSLO is the slo policy (issue "beyond static thresholds"): for each placement (local
// prefill on a decode worker, remote prefill then decode, the whole request on a prefill
// worker) it forecasts TTFT and TPOT from live load with the calibrated cost model and picks
// the placement with the most headroom for this request and for those already running. It
// runs after the preconditions (step 3); only is the decode pin (-1 = none).
func decideSLO(cfg *Config, in *Input, snap *Snapshot, rng *rand.Rand, only int, dec *Decision) {
	x := &dec.Inputs
	obj := cfg.Disagg.SLO
	if in.SLO.TTFT > 0 {
		obj.TTFT = in.SLO.TTFT
	}
	if in.SLO.TPOT > 0 {
		obj.TPOT = in.SLO.TPOT
	}
	x.SLO = obj
	e := estimator{m: cfg.Disagg.Cost, bs: cfg.BlockSize, isl: in.ISL, slo: obj, guard: cfg.Guard()}
	if cfg.Disagg.SLOFleet {
		// The fleet's steady state (fleet.go): every forecast below folds in the queue and the
		// prefill share its regime builds, not only the load booked at this instant.
		if x.Fleet = e.steady(in, snap); x.Fleet.View.Window > 0 {
			e.fleet = &x.Fleet
		}
	}

	bestD, bestDScore := -1, math.Inf(-1)     // bypass
	remoteD, remoteDScore := -1, math.Inf(-1) // decode side of the remote path
	var bypass Estimate
	for i := range snap.Decode {
		if only >= 0 && i != only {
			continue
		}
		w := sloWorker{l: &snap.Decode[i], cached: cached(cfg, &in.Decode[i], in.Now, in.ISL)}
		if est := e.local(w, true); est.Valid && est.Headroom > bestDScore {
			bestD, bestDScore, bypass = i, est.Headroom, est
			bypass.Decode = w.l.ID
		}
		if s := e.decodeSide(w); s > remoteDScore {
			remoteD, remoteDScore = i, s
		}
	}
	bestP, bestPScore := -1, math.Inf(-1) // prefill side of the remote path (shortest prefill)
	localP, localPScore := -1, math.Inf(-1)
	var whole Estimate // the best prefill_local forecast, recorded in Inputs
	for i := range snap.Prefill {
		c := 0
		if in.Prefill != nil {
			c = cached(cfg, &in.Prefill[i], in.Now, in.ISL)
		}
		w := sloWorker{l: &snap.Prefill[i], cached: c}
		if t := e.prefillMS(w); -t > bestPScore {
			bestP, bestPScore = i, -t
		}
		if only >= 0 {
			continue // a decode pin rules out decoding elsewhere
		}
		if est := e.local(w, false); est.Valid && est.Headroom > localPScore {
			localP, localPScore, whole = i, est.Headroom, est
			whole.Prefill = w.l.ID
		}
	}
	var remoteEst Estimate
	if bestP >= 0 && remoteD >= 0 {
		p := sloWorker{l: &snap.Prefill[bestP]}
		if in.Prefill != nil {
			p.cached = cached(cfg, &in.Prefill[bestP], in.Now, in.ISL)
		}
		d := sloWorker{l: &snap.Decode[remoteD], cached: cached(cfg, &in.Decode[remoteD], in.Now, in.ISL)}
		remoteEst = e.remote(p, d)
		remoteEst.Prefill, remoteEst.Decode = p.l.ID, d.l.ID
	}
	x.Estimates = [numRoutes]Estimate{RoutePrefill: remoteEst, RouteDecode: bypass, RoutePrefillLocal: whole}
	handoff := handoffPlan{holder: -1, decoder: -1}
	if cfg.Disagg.SLOHandoff {
		handoff = e.planHandoff(cfg, in, snap, only)
		x.Estimates[RouteHandoff] = handoff.est
	}
	rawBest := math.Inf(-1) // the most headroom before corrections
	for r := range x.Estimates {
		if est := &x.Estimates[r]; est.Valid {
			rawBest = max(rawBest, est.Headroom)
		}
		e.correct(cfg, in, Route(r), &x.Estimates[r])
	}

	// The most headroom wins; ties keep the order bypass, remote, prefill_local, handoff (the
	// cheapest placement for the fleet first; a handoff's estimate is invalid with it off).
	choice, best := RoutePrefill, math.Inf(-1)
	for _, r := range [...]Route{RouteDecode, RoutePrefill, RoutePrefillLocal, RouteHandoff} {
		if est := &x.Estimates[r]; est.Valid && est.Headroom > best {
			choice, best = r, est.Headroom
		}
	}
	bypassReason, localReason := ReasonSLOBypass, ReasonSLOPrefillLocal
	var r Route
	var i int
	var est Estimate
	x.AffinityWorker = in.Affinity
	x.Affinity, r, i, est = e.bound(cfg, in, snap, only, bestP)
	switch {
	case x.Affinity == AffinityHit:
		// The session's last worker meets the objective: its turn stays where its KV is
		// (or is about to be, while the previous turn still decodes).
		best = max(best, est.Headroom)
	case best >= cfg.Disagg.SLOMargin:
		// The objective has room: latency below it buys no goodput, so run the request whole
		// where the aggregated selection would, among the workers that keep the margin.
		r, i, est = e.aggregatedPlacement(cfg, in, snap, only, func(r Route, w sloWorker) (Estimate, bool) {
			est := e.local(w, r == RouteDecode)
			e.correct(cfg, in, r, &est)
			return est, est.Valid && est.Headroom >= cfg.Disagg.SLOMargin
		})
	case best < 0 && rawBest < 0 && (e.fleet == nil || !e.fleet.PrefersSplit()):
		// No placement is forecast to meet the objective (or none has KV room): placement
		// cannot save this request, so it goes where it costs the fleet least. A correction
		// alone never gives a request up: the controller's ratio is the mean error of the
		// requests that missed, and scaling a forecast the model says meets the objective by
		// it moved requests the policy could still place into this rule (conversation-x2
		// 4P4D 500 ms/30 ms: 4 % of goodput, docs/results.md "The controller on the fleet's
		// view"); such a request takes the placement with the most corrected headroom.
		r, i, est = e.aggregatedPlacement(cfg, in, snap, only, func(r Route, w sloWorker) (Estimate, bool) {
			if e.guard.Enabled && !e.fits(w.l, w.l.NewBlocks) {
				return Estimate{}, false
			}
			est := e.forecastLocal(w, r == RouteDecode)
			e.correct(cfg, in, r, &est)
			return est, true
		})
		if i >= 0 {
			best = 0
			bypassReason, localReason = ReasonSLOOverloadBypass, ReasonSLOOverloadPrefillLocal
		}
	default:
		i = -1
	}
	if i >= 0 {
		// The forecast recorded for the route is the chosen worker's, so Explain and the
		// controller compare what happens there with what was expected there.
		choice, x.Estimates[r] = r, est
		switch r {
		case RouteDecode:
			bestD = i
		case RoutePrefill:
			remoteD = i // the session's decode worker after a remote prefill at bestP
		default:
			localP = i
		}
	}
	switch {
	case best == math.Inf(-1):
		remote(cfg, in, snap, rng, dec, ReasonRemoteDecodeRejected)
	case choice == RouteDecode:
		previewDecode(cfg, in, snap, bestD, dec)
		dec.Route, dec.Reason = RouteDecode, bypassReason
		dec.Decode, dec.DecodeID = bestD, snap.Decode[bestD].ID
		dec.PrefillTokens = int64(dec.Inputs.Eff)
		dec.Guard = cfg.Guard()
	case choice == RouteHandoff:
		decideHandoff(in, snap, handoff, dec)
	case choice == RoutePrefillLocal:
		c := x.Estimates[RoutePrefillLocal].CachedTokens
		dec.Route, dec.Reason = RoutePrefillLocal, localReason
		dec.Prefill, dec.PrefillID = localP, snap.Prefill[localP].ID
		dec.PrefillTokens = int64(in.ISL - min(c, in.ISL))
		x.PrefillCached, x.Eff = c, in.ISL-min(c, in.ISL)
	default:
		dec.Prefill = bestP
		dec.remoteHint = remoteD + 1
		remote(cfg, in, snap, rng, dec, ReasonSLORemote)
	}
}

// estimator turns loads into forecasts with one cost model.
type estimator struct {
	m     cost.Model
	bs    int
	isl   int
	slo   SLO
	guard Guard
	fleet *FleetForecast // nil: forecasts from the instant's booked load only (slo_fleet off)
}

// steps is the scheduler steps and the step-time fixed part of prefilling tokens on w while
// its decodes keep running: ceil(tokens/mnbt) steps of t0 + d1·B + d2·C.
func (e *estimator) stepOverhead(l *WorkerLoad, tokens int64) float64 {
	budget := l.MaxBatchedTokens
	if budget <= 0 {
		budget = defaultBudget
	}
	steps := math.Ceil(float64(max(tokens, 1)) / float64(budget))
	return steps * (e.m.T0 + e.m.D1*float64(l.DecodeRequests) + e.m.D2*float64(l.ActiveDecodeBlocks)*float64(e.bs))
}

// defaultBudget stands in for an unknown max_num_batched_tokens (vLLM's default for
// chunked prefill on large GPUs).
const defaultBudget = 8192

// prefillMS is the time until w has prefilled the request: the prefill queued ahead of it
// (booked uncached tokens) and its own uncached suffix, in chunks that share steps with w's
// running decodes. The quadratic term charges the request's own attention over its prefix.
func (e *estimator) prefillMS(w sloWorker) float64 {
	n := int64(e.isl - min(w.cached, e.isl))
	q := w.l.ActivePrefillTokens
	pairs := float64(n) * (float64(w.cached) + float64(n)/2)
	return e.stepOverhead(w.l, q+n) + e.m.A1*float64(q+n) + e.m.A2*pairs
}

// decodeStepMS is one decode step on l with extra more sequences of ctx more context tokens,
// while prefill chunks of the queue ahead share the step (at most one budget's worth).
func (e *estimator) decodeStepMS(l *WorkerLoad, extraSeqs, extraCtx, prefillToks int64) float64 {
	budget := l.MaxBatchedTokens
	if budget <= 0 {
		budget = defaultBudget
	}
	ctx := float64(l.ActiveDecodeBlocks)*float64(e.bs) + float64(extraCtx)
	return e.m.T0 + e.m.A1*float64(min(prefillToks, budget)) + e.m.D1*float64(l.DecodeRequests+extraSeqs) + e.m.D2*ctx
}

// fits reports whether the request's blocks fit in l's KV cache next to what is booked there
// (unknown capacity fits; the decode-busy guard, when on, sets the bar lower).
func (e *estimator) fits(l *WorkerLoad, newBlocks int64) bool {
	if l.KVCapacityBlocks <= 0 {
		return !e.guard.Enabled
	}
	limit := float64(l.KVCapacityBlocks)
	if e.guard.Enabled {
		limit *= e.guard.Threshold
	}
	return float64(l.ActiveDecodeBlocks+newBlocks) <= limit
}

// correct applies route r's feedback corrections to est (factors 1 without feedback) and
// recomputes its headroom.
func (e *estimator) correct(cfg *Config, in *Input, r Route, est *Estimate) {
	est.TTFTFactor, est.TPOTFactor = 1, 1
	if cfg.Disagg.SLOFeedback && est.Valid {
		est.TTFTFactor, est.TPOTFactor = in.Feedback[r].factors()
		est.TTFTms *= est.TTFTFactor
		est.TPOTms *= est.TPOTFactor
		est.ExistingTPOTms *= est.TPOTFactor
		est.Headroom = e.headroom(est)
	}
}

// headroom is the smallest remaining fraction of the objectives.
func (e *estimator) headroom(est *Estimate) float64 {
	h := 1 - est.TTFTms/ms(e.slo.TTFT)
	h = min(h, 1-est.TPOTms/ms(e.slo.TPOT))
	if est.ExistingTPOTms > 0 {
		h = min(h, 1-est.ExistingTPOTms/ms(e.slo.TPOT))
	}
	return h
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// local forecasts the whole request on w (a decode worker's local prefill, or a prefill
// worker's prefill-and-decode): its prefill joins w's queue and its chunks slow w's running
// decodes; its decode steps carry w's remaining prefill queue.
func (e *estimator) local(w sloWorker, decodeWorker bool) Estimate {
	blocks := int64((e.isl + e.bs - 1) / e.bs)
	if decodeWorker {
		blocks = w.l.NewBlocks
	}
	if !e.fits(w.l, blocks) {
		return Estimate{}
	}
	return e.forecastLocal(w, decodeWorker)
}

// forecastLocal is local's forecast without the KV room check (decodeWorker: w is in the
// decode pool).
func (e *estimator) forecastLocal(w sloWorker, decodeWorker bool) Estimate {
	n := int64(e.isl - min(w.cached, e.isl))
	est := Estimate{Valid: true, CachedTokens: w.cached, PrefillQueueToks: w.l.ActivePrefillTokens}
	est.TTFTms = e.prefillMS(w)
	est.TPOTms = e.decodeStepMS(w.l, 1, int64(e.isl), w.l.ActivePrefillTokens)
	if w.l.DecodeRequests > 0 {
		est.ExistingTPOTms = e.decodeStepMS(w.l, 0, 0, w.l.ActivePrefillTokens+n)
	}
	est.Headroom = e.headroom(&est)
	if e.fleet != nil {
		e.steadyLocal(&est, w, decodeWorker)
	}
	return est
}

// decodeSide scores a decode worker as the remote path's target: the TPOT headroom of the new
// request and of those already decoding there (no prefill lands on it), less the transfer of
// the blocks it lacks.
func (e *estimator) decodeSide(w sloWorker) float64 {
	if !e.fits(w.l, int64((e.isl+e.bs-1)/e.bs)) {
		return math.Inf(-1)
	}
	tpot := e.decodeStepMS(w.l, 1, int64(e.isl), w.l.ActivePrefillTokens)
	xfer := ms(e.m.TransferTime(e.isl - min(w.cached, e.isl)))
	return min(1-tpot/ms(e.slo.TPOT), 1-xfer/ms(e.slo.TTFT))
}

// remote forecasts prefill at p, transfer of the suffix d lacks, then decode at d. p's running
// decodes (prefill_local requests) are slowed by the prefill; d's by one more sequence.
func (e *estimator) remote(p, d sloWorker) Estimate {
	est := e.twoLegs(p, d)
	if est.Valid && e.fleet != nil {
		e.steadyRemote(&est, p, d)
	}
	return est
}

// twoLegs forecasts a prefill leg at p (its queue, its cache hit, its chunks sharing steps
// with p's running decodes), the transfer of the KV d lacks, then the decode at d, from the
// booked load of the instant: the remote placement, and the handoff one with a decode worker
// as p. p's running decodes are slowed by the prefill, d's by one more sequence; d must have
// room for the whole prompt.
func (e *estimator) twoLegs(p, d sloWorker) Estimate {
	if !e.fits(d.l, int64((e.isl+e.bs-1)/e.bs)) {
		return Estimate{}
	}
	n := int64(e.isl - min(p.cached, e.isl))
	xferToks := e.isl - min(d.cached, e.isl)
	est := Estimate{Valid: true, CachedTokens: p.cached, TransferTokens: xferToks, PrefillQueueToks: p.l.ActivePrefillTokens}
	step := e.decodeStepMS(d.l, 1, int64(e.isl), d.l.ActivePrefillTokens)
	est.TTFTms = e.prefillMS(p) + ms(e.m.TransferTime(xferToks)) + step
	est.TPOTms = step
	if p.l.DecodeRequests > 0 {
		est.ExistingTPOTms = e.decodeStepMS(p.l, 0, 0, p.l.ActivePrefillTokens+n)
	}
	if d.l.DecodeRequests > 0 {
		est.ExistingTPOTms = max(est.ExistingTPOTms, step)
	}
	est.Headroom = e.headroom(&est)
	return est
}

// aggregatedPlacement runs the whole request where the aggregated selection of §6 would: the
// lowest bypass cost (queued prefill less cache credit, plus decode blocks and requests) over
// the decode and the prefill pool together, among the workers admit accepts (admit also
// returns the worker's forecast, recorded for the choice). A fleet works best as one
// aggregated pool when placement cannot change whether the objective is met: every placement
// keeps a margin, or none meets it. It returns the placement, the worker index (-1 when no
// worker is admitted) and its forecast.
func (e *estimator) aggregatedPlacement(cfg *Config, in *Input, snap *Snapshot, only int,
	admit func(Route, sloWorker) (Estimate, bool)) (Route, int, Estimate) {
	route, best, bestCost := RouteDecode, -1, math.Inf(1)
	var chosen Estimate
	consider := func(r Route, sel *selector, i int, w sloWorker) {
		c := sel.cost(i)
		if c >= bestCost {
			return
		}
		if est, ok := admit(r, w); ok {
			route, best, bestCost, chosen = r, i, c, est
			if r == RouteDecode {
				chosen.Decode = w.l.ID
			} else {
				chosen.Prefill = w.l.ID
			}
		}
	}
	sd := newSelector(cfg, in, snap.Decode, in.Decode, modeBypass)
	sd.only = only
	for i := range snap.Decode {
		if sd.candidate(i) {
			consider(RouteDecode, &sd, i, sloWorker{l: &snap.Decode[i], cached: cached(cfg, &in.Decode[i], in.Now, in.ISL)})
		}
	}
	if only < 0 { // a decode pin keeps the request on that worker
		sp := newSelector(cfg, in, snap.Prefill, in.Prefill, modeBypass)
		for i := range snap.Prefill {
			c := 0
			if in.Prefill != nil {
				c = cached(cfg, &in.Prefill[i], in.Now, in.ISL)
			}
			consider(RoutePrefillLocal, &sp, i, sloWorker{l: &snap.Prefill[i], cached: c})
		}
	}
	return route, best, chosen
}

// bound is soft session affinity under the slo policy: the session's bound worker (a decode
// worker for a local prefill, a prefill worker for the whole request) keeps the request while
// it has KV room under the guard (else AffinityGuard) and its corrected forecast meets the
// objective (headroom >= 0, else AffinityForecast). A bound decode worker whose local prefill
// breaks the objective may still decode after a remote prefill at bestP (the prefill worker
// with the shortest forecast), if that placement's forecast meets it: the session's KV stays
// where the last turn left it. It returns the outcome and, on a hit, the placement, the
// (decode or prefill_local) worker index and its forecast (index -1 otherwise).
func (e *estimator) bound(cfg *Config, in *Input, snap *Snapshot, only, bestP int) (Affinity, Route, int, Estimate) {
	if in.Affinity == "" {
		return AffinityNone, RouteDecode, -1, Estimate{}
	}
	r, i := RouteDecode, find(snap.Decode, in.Affinity)
	var w sloWorker
	switch {
	case i >= 0 && (only < 0 || i == only):
		w = sloWorker{l: &snap.Decode[i], cached: cached(cfg, &in.Decode[i], in.Now, in.ISL)}
	case i < 0 && only < 0:
		if r, i = RoutePrefillLocal, find(snap.Prefill, in.Affinity); i < 0 {
			return AffinityGone, RouteDecode, -1, Estimate{}
		}
		w = sloWorker{l: &snap.Prefill[i]}
		if in.Prefill != nil {
			w.cached = cached(cfg, &in.Prefill[i], in.Now, in.ISL)
		}
	default:
		return AffinityGone, RouteDecode, -1, Estimate{}
	}
	est := e.local(w, r == RouteDecode)
	e.correct(cfg, in, r, &est)
	if (!est.Valid || est.Headroom < 0) && r == RouteDecode && bestP >= 0 {
		p := sloWorker{l: &snap.Prefill[bestP]}
		if in.Prefill != nil {
			p.cached = cached(cfg, &in.Prefill[bestP], in.Now, in.ISL)
		}
		if rem := e.remote(p, w); rem.Valid {
			e.correct(cfg, in, RoutePrefill, &rem)
			if rem.Headroom >= 0 {
				rem.Prefill, rem.Decode = p.l.ID, w.l.ID
				return AffinityHit, RoutePrefill, i, rem
			}
			est = rem // KV room for the remote leg: the forecast is what failed
		}
	}
	if !est.Valid {
		return AffinityGuard, r, -1, Estimate{}
	}
	if est.Headroom < 0 {
		return AffinityForecast, r, -1, Estimate{}
	}
	if r == RouteDecode {
		est.Decode = w.l.ID
	} else {
		est.Prefill = w.l.ID
	}
	return AffinityHit, r, i, est
}
