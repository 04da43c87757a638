package policy

import (
	"fmt"
	"testing"
)

// referenceOutcome restates the tables of conditional-disagg.md §4.1 and §4.2 directly, with
// exact integer arithmetic for the ratio (R = 0.7 ⇒ ratio < R ⇔ 10·eff < 7·max(ISL,1)).
func referenceOutcome(k Kind, isl, eff int, busy Busy, silent bool, guardOn bool, pdb, kvcap int64) (Reason, Gate) {
	effLT := eff < 2048
	ratioLT := 10*eff < 7*max(isl, 1)
	islRemote := ReasonRemoteRatioTooHigh
	if !effLT {
		islRemote = ReasonRemoteISLTooLong // absolute check reported first
	}
	if silent {
		islRemote = ReasonRemoteNoKVEvents
	}
	var r Reason
	switch {
	case k == ISLBounding && effLT && ratioLT:
		r = ReasonBypassISL
	case k == ISLBounding:
		r = islRemote
	case k == PrefillLoad && busy == BusyTrue:
		r = ReasonBypassPrefillBusy
	case k == PrefillLoad && busy == BusyFalse:
		r = ReasonRemotePrefillNotBusy
	case k == PrefillLoad:
		r = ReasonRemotePrefillBusyUnknown
	case effLT && ratioLT && busy == BusyTrue:
		r = ReasonBypassISLAndPrefillBusy
	case effLT && ratioLT:
		r = ReasonBypassISL
	case busy == BusyTrue:
		r = ReasonBypassPrefillBusy
	default:
		r = islRemote
	}
	switch {
	case r.Route() == RoutePrefill:
		return r, GateDeclinedByPolicy
	case !guardOn:
		return r, GateAllowedDecodeGateDisabled
	case kvcap <= 0:
		return ReasonRemoteCapacityUnknown, GateDeniedDecodeBusyUnknown
	case 10*pdb > 8*kvcap: // θd = 0.8
		return ReasonRemoteDecodeBusy, GateDeniedDecodeBusy
	}
	return r, GateAllowedDecodeNotBusy
}

// TestDecideMatchesReference sweeps every policy across each threshold (one below, at, one
// above: eff around T, ratio around R, apt around θp·mnbt, pdb around θd·kvcap), unknown
// signals and silent streams, and compares Decide with the spec tables restated above.
func TestDecideMatchesReference(t *testing.T) {
	type prompt struct{ isl, gpu int }
	var prompts []prompt
	for _, eff := range []int{2047, 2048, 2049} { // around T, with ratios on both sides of R
		for _, k := range []int{0, 55, 56, 200} {
			prompts = append(prompts, prompt{eff + 16*k, k})
		}
	}
	for _, gpu := range []int{29, 30, 31} { // ISL 1600: ratio above, at, below R
		prompts = append(prompts, prompt{1600, gpu})
	}
	prompts = append(prompts, prompt{1, 0}, prompt{15, 1}, prompt{16, 1}, prompt{100000, 0}, prompt{4096, 256})
	type load struct {
		name    string
		apt     int64 // θp = 0.5, mnbt = 8192 ⇒ budget 4096
		unknown bool
	}
	loads := []load{{"apt_below", 4095, false}, {"apt_at", 4096, false}, {"apt_above", 4097, false}, {"apt_unknown", 0, true}}
	type guard struct {
		name       string
		on         bool
		pdb, kvcap int64 // θd = 0.8
	}
	guards := []guard{{"guard_off", false, 9000, 10000}, {"pdb_below", true, 7999, 10000}, {"pdb_at", true, 8000, 10000},
		{"pdb_above", true, 8001, 10000}, {"cap_unknown", true, 1, -1}, {"cap_zero", true, 1, 0}}
	n := 0
	for _, k := range []Kind{ISLBounding, PrefillLoad, ISLOrLoad} {
		for _, pr := range prompts {
			for _, ld := range loads {
				for _, g := range guards {
					for _, silent := range []bool{false, true} {
						cfg := enabledConfig()
						cfg.Disagg.Policy, cfg.Disagg.PrefillBusyThreshold = k, Set(0.5)
						if g.on {
							cfg.Disagg.DecodeBusyThreshold = Set(0.8)
						}
						snap := oneEach(WorkerLoad{ActiveDecodeBlocks: g.pdb, KVCapacityBlocks: g.kvcap},
							WorkerLoad{ActivePrefillTokens: ld.apt, MaxBatchedTokens: 8192})
						st := live()
						if silent {
							st.RoutedSinceStored, st.LastStored = 20, testNow.Add(-DefaultKVEventsSilence-1)
						}
						in := &Input{Now: testNow, ISL: pr.isl, Decode: []Signal{{Worker: "d0", GPU: pr.gpu, Stream: st}},
							Prefill: []Signal{{Worker: "p0", Stream: live()}}}
						busy := BusyFalse
						if ld.unknown {
							in.Prefill, busy = []Signal{{Worker: "elsewhere"}}, BusyUnknown
						} else if ld.apt > 4096 {
							busy = BusyTrue
						}
						cached := 16 * min(pr.gpu, (pr.isl-1)/16) // the engine computes the last token
						if silent {
							cached = 0
						}
						eff := pr.isl - min(cached, pr.isl)
						wantR, wantG := referenceOutcome(k, pr.isl, eff, busy, silent, g.on, g.pdb, g.kvcap)
						got := Decide(&cfg, in, snap, newRand(uint64(n)))
						n++
						name := fmt.Sprintf("%s/isl=%d/gpu=%d/%s/%s/silent=%v", k, pr.isl, pr.gpu, ld.name, g.name, silent)
						if got.Reason != wantR || got.Gate != wantG || got.Inputs.Eff != eff || got.Route != wantR.Route() {
							t.Errorf("%s: got %v/%v eff %d, want %v/%v eff %d", name, got.Reason, got.Gate, got.Inputs.Eff, wantR, wantG, eff)
						}
						if (k == ISLBounding) == got.Inputs.PrefillPreviewed {
							t.Errorf("%s: prefill previewed = %v", name, got.Inputs.PrefillPreviewed)
						}
					}
				}
			}
		}
	}
	if n < 2000 {
		t.Fatalf("only %d cases", n)
	}
}
