package policy

import (
	"math"
	"strings"
	"testing"
)

// handoffFleet: a 64,000-token prompt (4,000 blocks) of which d0 holds 3,994 blocks. d0
// decodes 60 long sequences (113,000 blocks of context): one more 64k-token sequence there
// would break the 100 ms TPOT objective, but a 96-token prefill chunk would not. d1 and the
// prefill pool are idle and hold nothing, so every placement that prefills the whole prompt
// (about 3.4 s of compute) breaks the 2 s TTFT objective. d0Blocks sets d0's decode context
// and d1GPU the blocks of the prompt d1 holds.
func handoffFleet(d0Blocks int64, d1GPU int) (*Snapshot, *Input) {
	s := sloFleet(func(d, p []WorkerLoad) {
		d[0].DecodeRequests, d[0].ActiveDecodeBlocks, d[0].KVCapacityBlocks = 60, d0Blocks, 200000
	})
	in := sloInput(s, handoffISL, 3994, d1GPU)
	return s, in
}

const handoffISL = 64000

// wantHandoff is the handoff forecast of handoffFleet computed from the cost model's
// coefficients by hand (perf-model.md §1, §4), independently of the estimator's code.
func wantHandoff(cfg *Config, d0Blocks int64, d1Cached int) (ttft, tpot, existing float64) {
	m, bs := cfg.Disagg.Cost, 16.0
	const reqs, isl, cachedA = 60.0, float64(handoffISL), 3994 * 16.0
	n := isl - cachedA
	d0Step := m.T0 + m.D1*reqs + m.D2*float64(d0Blocks)*bs // one step of d0's running decodes
	prefill := d0Step + m.A1*n + m.A2*n*(cachedA+n/2)      // the 96 tokens fit one chunk
	xferToks := isl - float64(d1Cached)
	xfer := m.XferAlphaMS + xferToks*m.BytesPerToken/(m.XferGBps*1e9)*1e3
	tpot = m.T0 + m.D1 + m.D2*isl // d1: idle but for the new sequence
	return prefill + xfer + tpot, tpot, d0Step + m.A1*n
}

// TestHandoffPricing: with slo_handoff on, the handoff is forecast with the holder's compute
// (its cache hit, its decodes slowed by the chunk), the transfer of the KV the decoder lacks,
// and the decoder's step; it is chosen where it alone meets the objective, and the decision
// names the holder as the prefill leg's worker. Off (the default), the same request is an
// overload placement.
func TestHandoffPricing(t *testing.T) {
	const d0Blocks = 113000
	for _, d1GPU := range []int{0, 1000} {
		cfg := sloConfig(t, `,"slo_handoff":true`)
		s, in := handoffFleet(d0Blocks, d1GPU)
		dec := Decide(&cfg, in, s, newRand(1))
		est := dec.Inputs.Estimates[RouteHandoff]
		if dec.Route != RouteHandoff || dec.Reason != ReasonSLOHandoff || !dec.Routable() {
			t.Fatalf("d1 holds %d blocks: route %v reason %v, want handoff (estimates %+v)", d1GPU, dec.Route, dec.Reason, dec.Inputs.Estimates)
		}
		if dec.PrefillID != "d0" || dec.Prefill != 0 || dec.DecodeID != "d1" || dec.Decode != 1 || dec.PrefillTokens != 96 ||
			dec.Inputs.PrefillCached != 3994*16 {
			t.Fatalf("holder %q (%d) decoder %q (%d) prefill tokens %d cached %d, want d0, d1, 96, %d",
				dec.PrefillID, dec.Prefill, dec.DecodeID, dec.Decode, dec.PrefillTokens, dec.Inputs.PrefillCached, 3994*16)
		}
		if dec.Route.Cluster() != "decode" || !dec.Route.PrefillOnDecode() {
			t.Fatalf("handoff cluster %q, prefill on decode %v", dec.Route.Cluster(), dec.Route.PrefillOnDecode())
		}
		ttft, tpot, existing := wantHandoff(&cfg, d0Blocks, d1GPU*16)
		if !near(est.TTFTms, ttft) || !near(est.TPOTms, tpot) || !near(est.ExistingTPOTms, existing) ||
			est.TransferTokens != handoffISL-d1GPU*16 || est.CachedTokens != 3994*16 || est.Prefill != "d0" || est.Decode != "d1" {
			t.Fatalf("d1 holds %d blocks: forecast %+v, want TTFT %.3f TPOT %.3f existing %.3f transfer %d",
				d1GPU, est, ttft, tpot, existing, handoffISL-d1GPU*16)
		}
		if want := min(1-ttft/2000, 1-tpot/100, 1-existing/100); !near(est.Headroom, want) {
			t.Fatalf("headroom %.5f, want %.5f", est.Headroom, want)
		}
		for r, e := range dec.Inputs.Estimates {
			if Route(r) != RouteHandoff && e.Valid && e.Headroom >= 0 {
				t.Fatalf("%v meets the objective too (%+v): the case does not isolate the handoff", Route(r), e)
			}
		}
	}
	cfg := sloConfig(t, ``)
	s, in := handoffFleet(d0Blocks, 0)
	if dec := Decide(&cfg, in, s, newRand(1)); dec.Route == RouteHandoff || dec.Inputs.Estimates[RouteHandoff].Valid ||
		(dec.Reason != ReasonSLOOverloadBypass && dec.Reason != ReasonSLOOverloadPrefillLocal) {
		t.Fatalf("slo_handoff off: route %v reason %v handoff estimate %+v, want an overload placement and no handoff forecast",
			dec.Route, dec.Reason, dec.Inputs.Estimates[RouteHandoff])
	}
}

func near(got, want float64) bool { return math.Abs(got-want) <= 1e-6*max(1, math.Abs(want)) }

// TestHandoffCosts: each cost the handoff carries can make it lose. A slow transfer breaks the
// TTFT objective; a holder whose decodes the prefill chunk would push past the TPOT objective
// breaks it there; a prefill worker holding the same prefix makes the remote prefill the
// placement that reuses it (no handoff is priced); an engine without NIXL can be neither side;
// and a holder that is the only decode worker has no one to hand off to.
func TestHandoffCosts(t *testing.T) {
	t.Run("slow_transfer", func(t *testing.T) {
		cfg := sloConfig(t, `,"slo_handoff":true`)
		cfg.Disagg.Cost.XferGBps = 0.05 // 64k tokens of KV take 168 s
		s, in := handoffFleet(113000, 0)
		dec := Decide(&cfg, in, s, newRand(1))
		est := dec.Inputs.Estimates[RouteHandoff]
		if dec.Route == RouteHandoff || !est.Valid || est.TTFTms < 100000 {
			t.Fatalf("route %v, handoff forecast %+v: want the transfer priced into TTFT and the handoff refused", dec.Route, est)
		}
	})
	t.Run("holder_too_busy_for_the_chunk", func(t *testing.T) {
		cfg := sloConfig(t, `,"slo_handoff":true`)
		s, in := handoffFleet(115000, 0) // d0's step 98.5 ms, plus the 2 ms chunk
		dec := Decide(&cfg, in, s, newRand(1))
		est := dec.Inputs.Estimates[RouteHandoff]
		if dec.Route == RouteHandoff || !est.Valid || est.ExistingTPOTms <= 100 {
			t.Fatalf("route %v, handoff forecast %+v: want d0's slowed decodes to break TPOT", dec.Route, est)
		}
	})
	t.Run("prefill_worker_holds_the_prefix", func(t *testing.T) {
		cfg := sloConfig(t, `,"slo_handoff":true`)
		s, in := handoffFleet(113000, 0)
		in.Prefill[1].GPU = 3994
		s.Prefill[1].NewBlocks = 6
		dec := Decide(&cfg, in, s, newRand(1))
		if dec.Route == RouteHandoff || dec.Inputs.Estimates[RouteHandoff].Valid || dec.PrefillID != "p1" {
			t.Fatalf("route %v prefill %q handoff %+v: want p1's cached prefix used, no handoff", dec.Route, dec.PrefillID,
				dec.Inputs.Estimates[RouteHandoff])
		}
	})
	t.Run("pinned_to_the_holder", func(t *testing.T) {
		cfg := sloConfig(t, `,"slo_handoff":true`)
		s, in := handoffFleet(113000, 0)
		in.Pin.Decode = "d0"
		if dec := Decide(&cfg, in, s, newRand(1)); dec.Route == RouteHandoff || dec.DecodeID != "d0" {
			t.Fatalf("pinned to d0: route %v decode %q", dec.Route, dec.DecodeID)
		}
	})
	t.Run("pinned_to_the_decoder", func(t *testing.T) {
		cfg := sloConfig(t, `,"slo_handoff":true`)
		s, in := handoffFleet(113000, 0)
		in.Pin.Decode = "d1"
		if dec := Decide(&cfg, in, s, newRand(1)); dec.Route != RouteHandoff || dec.DecodeID != "d1" || dec.PrefillID != "d0" {
			t.Fatalf("pinned to d1: route %v decode %q prefill %q, want the handoff d0 -> d1", dec.Route, dec.DecodeID, dec.PrefillID)
		}
	})
	t.Run("engines_without_nixl", func(t *testing.T) {
		for _, w := range []int{0, 1} { // the holder, then the only decoder, is an SGLang worker
			cfg := sloConfig(t, `,"slo_handoff":true`)
			s, in := handoffFleet(113000, 0)
			s.Decode[w].NoNIXL = true
			if dec := Decide(&cfg, in, s, newRand(1)); dec.Route == RouteHandoff || dec.Inputs.Estimates[RouteHandoff].Valid {
				t.Fatalf("d%d without NIXL: route %v handoff %+v", w, dec.Route, dec.Inputs.Estimates[RouteHandoff])
			}
		}
	})
	t.Run("one_decode_worker", func(t *testing.T) {
		cfg := sloConfig(t, `,"slo_handoff":true`)
		s, in := handoffFleet(113000, 0)
		s.Decode, in.Decode = s.Decode[:1], in.Decode[:1]
		if dec := Decide(&cfg, in, s, newRand(1)); dec.Route == RouteHandoff || dec.Inputs.Estimates[RouteHandoff].Valid {
			t.Fatalf("one decode worker: route %v handoff %+v", dec.Route, dec.Inputs.Estimates[RouteHandoff])
		}
	})
}

// TestHandoffConfig: slo_handoff parses, shows in the config string only when on, and a bad
// value is refused with the field's name and the fix.
func TestHandoffConfig(t *testing.T) {
	if cfg := sloConfig(t, ``); cfg.Disagg.SLOHandoff || strings.Contains(cfg.Disagg.String(), "slo_handoff") {
		t.Fatalf("default: %+v %s", cfg.Disagg.SLOHandoff, cfg.Disagg.String())
	}
	if cfg := sloConfig(t, `,"slo_handoff":true`); !cfg.Disagg.SLOHandoff || !strings.Contains(cfg.Disagg.String(), `"slo_handoff":true`) {
		t.Fatalf("on: %+v %s", cfg.Disagg.SLOHandoff, cfg.Disagg.String())
	}
	_, err := ParseDisagg([]byte(`{"policy":"slo","cost_model":"llama3.1-8b-h100","slo_handoff":"yes"}`))
	if err == nil || !strings.Contains(err.Error(), `slo_handoff: "yes" must be true or false`) {
		t.Fatalf("error %v", err)
	}
}
