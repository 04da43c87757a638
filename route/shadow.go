package route

import (
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/condisagg/condisagg/policy"
)

// Shadow evaluation: a candidate policy config decides beside the live one on every routed
// request, on the same snapshot and overlaps, and books nothing. Its choice never reaches
// Envoy; the Router counts how often the two agree and, when either is the slo policy, what
// its cost model forecasts for each choice. Promoting the candidate is SetPolicy.

// ShadowChoice is what the candidate would have done with one request.
type ShadowChoice struct {
	Route           policy.Route
	Reason          policy.Reason
	Decode, Prefill string // worker ids ("" where the route names none)
	// SameRoute: the live decision took the same route; SameWorkers: and the same workers.
	SameRoute, SameWorkers bool
	// Forecast is set when an slo forecast (either config is slo) has a valid estimate of
	// both choices: the forecast headroom and TTFT of the live choice and of the candidate's.
	Forecast                     bool
	LiveHeadroom, ShadowHeadroom float64
	LiveTTFTms, ShadowTTFTms     float64
}

// ShadowStats are the counts since the candidate was set (SetShadow resets them).
type ShadowStats struct {
	Config      string // the candidate's policy JSON ("" when none is set)
	Decisions   uint64 // requests both configs decided
	SameRoute   uint64
	SameWorkers uint64
	// ByRoute[live][shadow] counts every pair of routes; ByReason counts the candidate's reasons.
	ByRoute  [policy.NumRoutes][policy.NumRoutes]uint64
	ByReason map[string]uint64
	// Forecasts counts the decisions with a forecast of both choices; the sums are of the
	// forecast TTFT (ms) and headroom of each choice over them.
	Forecasts                          uint64
	LiveTTFTmsSum, ShadowTTFTmsSum     float64
	LiveHeadroomSum, ShadowHeadroomSum float64
}

// shadowState is the Router's candidate and its counters.
type shadowState struct {
	cfg   atomic.Pointer[policy.Config] // nil: no candidate
	mu    sync.Mutex                    // guards stats
	stats ShadowStats
}

// shadowSalt separates the candidate's tie-break randomness from the live decision's, so a
// candidate never changes what the live config decides.
const shadowSalt = 0x5ead0e7a1

// SetShadow validates c and makes it the candidate (nil removes it); the counters restart.
func (r *Router) SetShadow(c *policy.Config) error {
	if c != nil {
		if err := c.Validate(); err != nil {
			return err
		}
	}
	r.shadow.mu.Lock()
	defer r.shadow.mu.Unlock()
	r.shadow.cfg.Store(c)
	r.shadow.stats = ShadowStats{}
	if c != nil {
		r.shadow.stats.Config = c.Disagg.String()
	}
	return nil
}

// ShadowConfig returns the candidate (nil when none).
func (r *Router) ShadowConfig() *policy.Config { return r.shadow.cfg.Load() }

// ShadowStats returns a copy of the counters.
func (r *Router) ShadowStats() ShadowStats {
	r.shadow.mu.Lock()
	defer r.shadow.mu.Unlock()
	s := r.shadow.stats
	s.ByReason = make(map[string]uint64, len(r.shadow.stats.ByReason))
	for k, v := range r.shadow.stats.ByReason {
		s.ByReason[k] = v
	}
	return s
}

// PromoteShadow makes the candidate the live policy and removes it.
func (r *Router) PromoteShadow() error {
	c := r.shadow.cfg.Load()
	if c == nil {
		return errors.New("route: no shadow config to promote")
	}
	if err := r.SetPolicy(c); err != nil {
		return err
	}
	return r.SetShadow(nil)
}

// decideShadow runs the candidate (with m's block size) on the inputs the live decision used.
func (r *Router) decideShadow(m *model, in *policy.Input, sc *scratch, n uint64) (policy.Decision, bool) {
	c := r.shadow.cfg.Load()
	if c == nil {
		return policy.Decision{}, false
	}
	if m.blockSize != 0 && m.blockSize != c.BlockSize {
		cc := *c
		cc.BlockSize = m.blockSize
		c = &cc
	}
	sc.shadowPCG.Seed(r.seed^shadowSalt, n)
	return policy.Decide(c, in, &sc.snap, rand.New(&sc.shadowPCG)), true
}

// compareShadow fills the candidate's choice against the live decision and counts it.
func (r *Router) compareShadow(live, cand *policy.Decision) *ShadowChoice {
	ch := &ShadowChoice{Route: cand.Route, Reason: cand.Reason, Decode: cand.DecodeID, Prefill: cand.PrefillID}
	if cand.Route == policy.RouteDecode {
		ch.Prefill = ""
	}
	if cand.Route == policy.RoutePrefillLocal {
		ch.Decode = ""
	}
	liveDecode, livePrefill := live.DecodeID, live.PrefillID
	if live.Route == policy.RouteDecode {
		livePrefill = ""
	}
	if live.Route == policy.RoutePrefillLocal {
		liveDecode = ""
	}
	ch.SameRoute = live.Route == cand.Route
	ch.SameWorkers = ch.SameRoute && liveDecode == ch.Decode && livePrefill == ch.Prefill
	// The slo forecast of either side prices both choices (its best worker per placement).
	var est *[policy.NumRoutes]policy.Estimate
	switch {
	case cand.Inputs.Policy == policy.SLOKind:
		est = &cand.Inputs.Estimates
	case live.Inputs.Policy == policy.SLOKind:
		est = &live.Inputs.Estimates
	}
	if est != nil {
		l, s := est[live.Route], est[cand.Route]
		ch.Forecast = l.Valid && s.Valid
		ch.LiveHeadroom, ch.ShadowHeadroom, ch.LiveTTFTms, ch.ShadowTTFTms = l.Headroom, s.Headroom, l.TTFTms, s.TTFTms
	}
	r.shadow.mu.Lock()
	defer r.shadow.mu.Unlock()
	st := &r.shadow.stats
	st.Decisions++
	if ch.SameRoute {
		st.SameRoute++
	}
	if ch.SameWorkers {
		st.SameWorkers++
	}
	if int(live.Route) < policy.NumRoutes && int(cand.Route) < policy.NumRoutes {
		st.ByRoute[live.Route][cand.Route]++
	}
	if st.ByReason == nil {
		st.ByReason = map[string]uint64{}
	}
	st.ByReason[cand.Reason.String()]++
	if ch.Forecast {
		st.Forecasts++
		st.LiveTTFTmsSum += ch.LiveTTFTms
		st.ShadowTTFTmsSum += ch.ShadowTTFTms
		st.LiveHeadroomSum += ch.LiveHeadroom
		st.ShadowHeadroomSum += ch.ShadowHeadroom
	}
	return ch
}
