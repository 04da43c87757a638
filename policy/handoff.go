package policy

import "math"

// The handoff placement (slo_handoff): the decode worker that holds most of the prompt's
// prefix runs the prefill leg (mostly a cache hit, NixlConnector do_remote_decode), and
// another decode worker pulls the prompt's KV and decodes. It pays when the holder is too busy
// to take one more decode (its TPOT, or its running requests' TPOT, would break the objective)
// while the prefill pool holds none of the prefix and another decode worker has room: the
// holder computes only the uncached suffix, the decoder pays one KV transfer.
//
// It is priced like the other placements and wins only with strictly more headroom than each
// of them (ties keep the cheaper placements), so with slo_handoff off, or when it does not beat
// them, the policy decides exactly as before.

// handoffPlan is the handoff's best pair: the holder (prefill leg) and the decoder, both
// indexes of Snapshot.Decode (-1 when there is none), and its forecast.
type handoffPlan struct {
	holder, decoder int
	est             Estimate
}

// planHandoff picks, among the decode workers whose engine speaks NIXL (vLLM), the holder —
// the decode worker with the most cached prompt tokens (ties:
// the shortest prefill forecast), which must hold more than any prefill worker, or the remote
// placement reuses the same prefix without loading a decode worker — and the decoder with the
// best remote-decode score among the others (a decode pin restricts the decoder, not the
// holder), and forecasts the pair.
func (e *estimator) planHandoff(cfg *Config, in *Input, snap *Snapshot, only int) handoffPlan {
	plan := handoffPlan{holder: -1, decoder: -1}
	if len(snap.Decode) < 2 {
		return plan
	}
	maxPrefillCached := 0
	for i := range in.Prefill {
		maxPrefillCached = max(maxPrefillCached, cached(cfg, &in.Prefill[i], in.Now, in.ISL))
	}
	var a sloWorker
	bestPrefill := math.Inf(1)
	for i := range snap.Decode {
		c := cached(cfg, &in.Decode[i], in.Now, in.ISL)
		if snap.Decode[i].NoNIXL || c < cfg.BlockSize || c <= maxPrefillCached || (plan.holder >= 0 && c < a.cached) {
			continue
		}
		w := sloWorker{l: &snap.Decode[i], cached: c}
		t := e.prefillMS(w)
		if plan.holder >= 0 && c == a.cached && t >= bestPrefill {
			continue
		}
		plan.holder, a, bestPrefill = i, w, t
	}
	if plan.holder < 0 {
		return plan
	}
	bestScore := math.Inf(-1)
	var b sloWorker
	for i := range snap.Decode {
		if i == plan.holder || (only >= 0 && i != only) || snap.Decode[i].NoNIXL {
			continue
		}
		w := sloWorker{l: &snap.Decode[i], cached: cached(cfg, &in.Decode[i], in.Now, in.ISL)}
		if s := e.decodeSide(w); s > bestScore {
			plan.decoder, b, bestScore = i, w, s
		}
	}
	if plan.decoder < 0 {
		return plan
	}
	plan.est = e.handoff(a, b)
	if plan.est.Valid {
		plan.est.Prefill, plan.est.Decode = a.l.ID, b.l.ID
	}
	return plan
}

// handoff forecasts the prefill of the request on decode worker a (its queue, its cache hit,
// its chunks sharing steps with a's running decodes), the transfer of the KV b lacks (the whole
// prompt unless b holds part of it: vLLM's decode side pulls only the blocks past its own
// prefix hit), then the decode at b. The running decodes of a are slowed by the prefill, b's
// by one more sequence. a must have room for the blocks it computes until b pulls them, b for
// the whole prompt.
func (e *estimator) handoff(a, b sloWorker) Estimate {
	n := int64(e.isl - min(a.cached, e.isl))
	if !e.fits(a.l, (n+int64(e.bs)-1)/int64(e.bs)) {
		return Estimate{}
	}
	// The fleet's steady state (slo_fleet) is not folded in: its split regime prices a prefill
	// on the prefill pool, and this leg runs on a decode worker.
	return e.twoLegs(a, b)
}

// decideHandoff fills dec for the handoff plan: the decode route's worker is the decoder, the
// prefill worker fields name the holder (an index of Snapshot.Decode: Route.PrefillOnDecode),
// whose prefill entry is the prompt less its cached prefix.
func decideHandoff(in *Input, snap *Snapshot, plan handoffPlan, dec *Decision) {
	c := dec.Inputs.Estimates[RouteHandoff].CachedTokens
	dec.Route, dec.Reason, dec.Guard = RouteHandoff, ReasonSLOHandoff, Guard{}
	dec.Decode, dec.DecodeID = plan.decoder, snap.Decode[plan.decoder].ID
	dec.Prefill, dec.PrefillID = plan.holder, snap.Decode[plan.holder].ID
	dec.PrefillTokens = int64(in.ISL - min(c, in.ISL))
	dec.Inputs.PrefillCached = c
}
