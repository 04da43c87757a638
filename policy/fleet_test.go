package policy

import (
	"strings"
	"testing"
	"time"
)

// sloConfig70B is the slo policy on the 70B TP4 H100 model under 500 ms / 30 ms.
func sloConfig70B(t *testing.T, extra string) Config {
	t.Helper()
	c := enabledConfig()
	d, err := ParseDisagg([]byte(`{"policy":"slo","cost_model":"llama3.1-70b-h100-tp4","slo_ttft_ms":500,"slo_tpot_ms":30` + extra + `}`))
	if err != nil {
		t.Fatal(err)
	}
	c.Disagg = d
	mustValid(t, c)
	return c
}

// busyDecodes gives every decode worker 80 running sequences of ~1k tokens of context.
func busyDecodes(d, _ []WorkerLoad) {
	for i := range d {
		d[i].DecodeRequests, d[i].ActiveDecodeBlocks = 80, 80*63
	}
}

// offered is a fleet view of 33 placements/s and 20,000 prompt tokens/s (600 each), half
// prefilled on each pool, with ~250 output tokens per placement.
func offered(scale float64) FleetView {
	r := PoolRates{Requests: 16.5 * scale, PrefillTokens: 10000 * scale, PrefillPairs: 10000 * scale * 300, OutputTokens: 4125 * scale}
	return FleetView{Window: 10 * time.Second, Decode: r, Prefill: r}
}

// TestSLOFleetSplits: a 70B fleet whose offered prompt load, prefilled everywhere, puts a
// prefill share of ~30% into every decode step. Under 500 ms / 30 ms that breaks the TPOT margin
// (the aggregated steady state), while split it does not: with slo_fleet the policy prefills
// remotely; without it (or without a view) it reads idle queues and prefills locally.
func TestSLOFleetSplits(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fleet string
		view  FleetView
		split bool // remote prefill; else the whole request on one worker
	}{
		{"instant_view_only", `,"slo_fleet":false`, offered(1), false},
		{"no_history", `,"slo_fleet":true`, FleetView{}, false},
		{"steady_state_splits", `,"slo_fleet":true`, offered(1), true},
		// A third of the load: prefilled everywhere it costs each decode step ~10%, within the
		// margin, so the request runs whole where aggregated selection puts it.
		{"light_load_stays_aggregated", `,"slo_fleet":true`, offered(1.0 / 3), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := sloConfig70B(t, tc.fleet)
			s := sloFleet(busyDecodes)
			in := sloInput(s, 600)
			in.Fleet = tc.view
			dec := Decide(&cfg, in, s, newRand(1))
			if (dec.Route == RoutePrefill) != tc.split || !dec.Routable() {
				t.Fatalf("route %v (%v), want split %v; fleet %+v; estimates %+v", dec.Route, dec.Reason, tc.split, dec.Inputs.Fleet, dec.Inputs.Estimates)
			}
			f := dec.Inputs.Fleet
			if on := !strings.Contains(tc.fleet, "false") && tc.view.Window > 0; on != (f.View.Window > 0) {
				t.Fatalf("fleet forecast recorded %v, want %v: %+v", f.View.Window > 0, on, f)
			}
			if tc.name == "steady_state_splits" {
				if !f.PrefersSplit() || f.Aggregated.Headroom >= cfg.Disagg.SLOMargin || f.Split.Headroom < cfg.Disagg.SLOMargin {
					t.Fatalf("regimes %+v", f)
				}
				// 20,000 tokens/s at 0.06 ms/token over 4 workers, and over the 2 prefill workers.
				if f.Aggregated.Util < 0.30 || f.Aggregated.Util > 0.32 || f.Split.Util < 0.60 || f.Split.Util > 0.64 {
					t.Fatalf("utilisations %v and %v", f.Aggregated.Util, f.Split.Util)
				}
			}
		})
	}
}

// TestSLOFleetSaturatedPrefillPool: when the prefill pool alone cannot sustain the offered
// prompt load, the split regime's queue wait breaks the TTFT objective and the policy does not
// split, even under overload.
func TestSLOFleetSaturatedPrefillPool(t *testing.T) {
	cfg := sloConfig70B(t, `,"slo_fleet":true`)
	s := sloFleet(busyDecodes)
	in := sloInput(s, 600)
	in.Fleet = offered(2.5) // 50,000 tokens/s: 1.5 prefill workers' worth per prefill worker
	dec := Decide(&cfg, in, s, newRand(1))
	f := dec.Inputs.Fleet
	if !f.Split.Saturated || f.Split.Headroom >= 0 || f.PrefersSplit() {
		t.Fatalf("split regime %+v, aggregated %+v", f.Split, f.Aggregated)
	}
	if dec.Route == RoutePrefill {
		t.Fatalf("split into a saturated prefill pool: %v (%v), estimates %+v", dec.Route, dec.Reason, dec.Inputs.Estimates)
	}
}

// TestSLOFleetConfig: slo_fleet parses, shows in the config string only when on, and a wrong
// value names the field.
func TestSLOFleetConfig(t *testing.T) {
	if c := sloConfig(t, ``); !c.Disagg.SLOFleet || strings.Contains(c.Disagg.String(), "slo_fleet") {
		t.Fatalf("default %+v / %s", c.Disagg.SLOFleet, c.Disagg.String())
	}
	if c := sloConfig(t, `,"slo_fleet":false`); c.Disagg.SLOFleet || !strings.Contains(c.Disagg.String(), `"slo_fleet":false`) {
		t.Fatalf("off: %s", c.Disagg.String())
	}
	_, err := ParseDisagg([]byte(`{"policy":"slo","cost_model":"llama3.1-8b-h100","slo_fleet":1}`))
	if err == nil || !strings.Contains(err.Error(), "slo_fleet: 1 must be true or false") {
		t.Fatalf("error %v", err)
	}
}
