package policy

import (
	"testing"
)

// affinityFleet is sloFleet with the request's prefix cached on d1 (so the cost selection
// picks d1), and the session bound to d0.
func affinityFleet(load func(d, p []WorkerLoad)) (*Snapshot, *Input) {
	s := sloFleet(load)
	in := sloInput(s, 4000, 0, 200)
	in.Affinity = "d0"
	return s, in
}

// TestAffinityDynamoPolicies: under the Dynamo policies the bound decode worker is the
// preview and the remote path's decode target, though the cost selection prefers another,
// until the decode-busy guard bars it; a bound worker that left is worker_gone. Without the
// binding (Affinity "") the same request goes to d1, so each case fails with the rule off.
func TestAffinityDynamoPolicies(t *testing.T) {
	guarded := func(t *testing.T) Config {
		c := enabledConfig()
		c.Disagg.DecodeBusyThreshold = Threshold{Value: 0.5, Set: true}
		mustValid(t, c)
		return c
	}
	plain := func(t *testing.T) Config { c := enabledConfig(); mustValid(t, c); return c }
	tests := []struct {
		name    string
		cfg     func(*testing.T) Config
		load    func(d, p []WorkerLoad)
		bind    string
		route   Route
		decode  string
		outcome Affinity
	}{
		// d1 holds the prefix: a local prefill there.
		{"no_binding_follows_cost", plain, nil, "", RouteDecode, "d1", AffinityNone},
		// isl_bounding: d0 has nothing cached (ratio 1.0) so the request goes remote, and its
		// decode leg still lands on d0, the session's worker.
		{"binding_honoured_remote_decode", plain, nil, "d0", RoutePrefill, "d0", AffinityHit},
		{"binding_honoured_guard_passes", guarded, nil, "d0", RoutePrefill, "d0", AffinityHit},
		{"guard_overrides_binding", guarded, func(d, p []WorkerLoad) { d[0].ActiveDecodeBlocks = 20000 }, "d0", RouteDecode, "d1", AffinityGuard},
		{"capacity_unknown_overrides_binding", guarded, func(d, p []WorkerLoad) { d[0].KVCapacityBlocks = 0 }, "d0", RouteDecode, "d1", AffinityGuard},
		{"bound_worker_gone", plain, nil, "d9", RouteDecode, "d1", AffinityGone},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg(t)
			s, in := affinityFleet(tc.load)
			in.Affinity = tc.bind
			dec := Decide(&cfg, in, s, newRand(1))
			if dec.Route != tc.route || dec.DecodeID != tc.decode || dec.Inputs.Affinity != tc.outcome {
				t.Fatalf("route %v decode %s affinity %v, want %v %s %v (reason %v)", dec.Route, dec.DecodeID,
					dec.Inputs.Affinity, tc.route, tc.decode, tc.outcome, dec.Reason)
			}
			if dec.Inputs.AffinityWorker != tc.bind {
				t.Fatalf("AffinityWorker %q, want %q", dec.Inputs.AffinityWorker, tc.bind)
			}
		})
	}
}

// TestAffinityBypassOnBoundWorker: a bound worker that holds the prefix gets the local prefill
// even when another worker's cost is lower (here d1 is idle and d0 carries load).
func TestAffinityBypassOnBoundWorker(t *testing.T) {
	cfg := enabledConfig()
	mustValid(t, cfg)
	s := sloFleet(func(d, p []WorkerLoad) { d[0].ActiveDecodeBlocks, d[0].ActivePrefillTokens = 3000, 9000 })
	in := sloInput(s, 4000, 200, 200)
	if dec := Decide(&cfg, in, s, newRand(1)); dec.DecodeID != "d1" || dec.Route != RouteDecode {
		t.Fatalf("without a binding: %v on %s, want decode on d1", dec.Route, dec.DecodeID)
	}
	in.Affinity = "d0"
	dec := Decide(&cfg, in, s, newRand(1))
	if dec.Route != RouteDecode || dec.DecodeID != "d0" || dec.Reason != ReasonBypassISL || dec.Inputs.Affinity != AffinityHit {
		t.Fatalf("bound: %v %v on %s affinity %v", dec.Route, dec.Reason, dec.DecodeID, dec.Inputs.Affinity)
	}
}

// TestAffinityAggregated: with no prefill workers the binding picks the aggregated worker too.
func TestAffinityAggregated(t *testing.T) {
	cfg := enabledConfig()
	mustValid(t, cfg)
	s, in := affinityFleet(nil)
	s.Prefill, in.Prefill = nil, nil
	in.Affinity = ""
	if dec := Decide(&cfg, in, s, newRand(1)); dec.DecodeID != "d1" {
		t.Fatalf("without a binding: %s", dec.DecodeID)
	}
	in.Affinity = "d0"
	if dec := Decide(&cfg, in, s, newRand(1)); dec.DecodeID != "d0" || dec.Reason != ReasonNoPrefillWorkers || dec.Inputs.Affinity != AffinityHit {
		t.Fatalf("bound: %s %v %v", dec.DecodeID, dec.Reason, dec.Inputs.Affinity)
	}
}

// TestAffinitySLO: under the slo policy the bound worker keeps the turn while its forecast meets
// the objective (a local prefill, else as the decode leg of a remote prefill); a forecast past it (overridden_forecast) or no KV room under the guard
// (overridden_guard) returns the decision to the forecast's own choice. A binding to a prefill
// worker keeps the whole request there.
func TestAffinitySLO(t *testing.T) {
	tests := []struct {
		name    string
		extra   string
		load    func(d, p []WorkerLoad)
		bind    string
		route   Route
		worker  string
		outcome Affinity
	}{
		{"no_binding_follows_forecast", ``, nil, "", RouteDecode, "d1", AffinityNone},
		{"binding_honoured", ``, nil, "d0", RouteDecode, "d0", AffinityHit},
		{"binding_to_prefill_worker", ``, nil, "p1", RoutePrefillLocal, "p1", AffinityHit},
		// 300 decodes of 4k context on d0: a local 4k prefill there breaks the 100 ms TPOT,
		// a remote prefill with d0 decoding meets it, so the session's KV stays on d0.
		{"local_breaks_objective_remote_keeps_session", ``, func(d, p []WorkerLoad) {
			d[0].DecodeRequests, d[0].ActiveDecodeBlocks, d[0].KVCapacityBlocks = 300, 300*256, 100000
		}, "d0", RoutePrefill, "d0", AffinityHit},
		// 700 decodes on d0: one more sequence there breaks the TPOT objective on any placement.
		{"forecast_overrides_binding", ``, func(d, p []WorkerLoad) {
			d[0].DecodeRequests, d[0].ActiveDecodeBlocks, d[0].KVCapacityBlocks = 700, 700*256, 400000
		}, "d0", RouteDecode, "d1", AffinityForecast},
		{"guard_overrides_binding", `,"decode_busy_threshold":0.5`, func(d, p []WorkerLoad) {
			d[0].ActiveDecodeBlocks = 15000
		}, "d0", RouteDecode, "d1", AffinityGuard},
		{"bound_worker_gone", ``, nil, "d7", RouteDecode, "d1", AffinityGone},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := sloConfig(t, tc.extra)
			s, in := affinityFleet(tc.load)
			in.Affinity = tc.bind
			dec := Decide(&cfg, in, s, newRand(1))
			got := dec.DecodeID
			if dec.Route == RoutePrefillLocal {
				got = dec.PrefillID
			}
			if dec.Route != tc.route || got != tc.worker || dec.Inputs.Affinity != tc.outcome {
				t.Fatalf("route %v worker %s affinity %v, want %v %s %v (reason %v, estimates %+v)", dec.Route, got,
					dec.Inputs.Affinity, tc.route, tc.worker, tc.outcome, dec.Reason, dec.Inputs.Estimates)
			}
			if tc.outcome == AffinityHit && !dec.Inputs.Estimates[tc.route].Valid {
				t.Fatalf("the bound placement's forecast is not recorded: %+v", dec.Inputs.Estimates)
			}
		})
	}
}

func TestAffinityString(t *testing.T) {
	seen := map[string]bool{}
	for _, a := range append(Affinities(), AffinityNone) {
		if seen[a.String()] {
			t.Fatalf("label %q twice", a)
		}
		seen[a.String()] = true
	}
	if len(seen) != int(numAffinities) {
		t.Fatalf("%d labels for %d outcomes", len(seen), numAffinities)
	}
}
