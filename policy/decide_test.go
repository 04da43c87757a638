package policy

import (
	"testing"
)

// kernelRow is one row of §4.1 / §11 (kernel K*, prefill busy B*/L*/O*, guard G*).
type kernelRow struct {
	spec, name string
	cfg        func(*Config)
	isl        int
	gpu        int // decode overlap blocks
	host, disk int
	silent     bool
	dec        WorkerLoad // ID filled in
	pre        WorkerLoad
	misalignP  bool // prefill signals that do not match the snapshot (preview error)
	want       outcome
	wantCached int
}

func policyIs(k Kind, thp ...float64) func(*Config) {
	return func(c *Config) {
		c.Disagg.Policy = k
		if len(thp) > 0 {
			c.Disagg.PrefillBusyThreshold = Set(thp[0])
		}
	}
}

func bypass(r Reason, eff int) outcome {
	return outcome{Route: RouteDecode, Reason: r, Gate: GateAllowedDecodeGateDisabled, Decode: "d0", Eff: eff}
}

func remoteO(r Reason, eff int) outcome {
	return outcome{Route: RoutePrefill, Reason: r, Gate: GateDeclinedByPolicy, Decode: "d0", Prefill: "p0", Eff: eff}
}

func withBusy(o outcome, b Busy) outcome { o.Busy, o.Previewed = b, true; return o }

func runKernel(t *testing.T, rows []kernelRow) {
	t.Helper()
	for _, r := range rows {
		t.Run(r.spec+"_"+r.name, func(t *testing.T) {
			cfg := enabledConfig()
			if r.cfg != nil {
				r.cfg(&cfg)
			}
			mustValid(t, cfg)
			if r.dec == (WorkerLoad{}) {
				r.dec.KVCapacityBlocks = 40000
			}
			if r.pre.MaxBatchedTokens == 0 {
				r.pre.MaxBatchedTokens = 8192
			}
			snap := oneEach(r.dec, r.pre)
			st := live()
			if r.silent {
				st = Stream{}
			}
			in := &Input{Now: testNow, ISL: r.isl,
				Decode:  []Signal{{Worker: "d0", GPU: r.gpu, Host: r.host, Disk: r.disk, Stream: st}},
				Prefill: []Signal{{Worker: "p0", Stream: live()}}}
			if r.misalignP {
				in.Prefill = []Signal{{Worker: "other"}}
			}
			got := Decide(&cfg, in, snap, newRand(1))
			if g := outcomeOf(got); g != r.want {
				t.Errorf("Decide:\n got  %+v\n want %+v", g, r.want)
			}
			if r.wantCached != 0 && got.Inputs.Cached != r.wantCached {
				t.Errorf("cached = %d, want %d", got.Inputs.Cached, r.wantCached)
			}
		})
	}
}

func TestDecideKernelISLBounding(t *testing.T) {
	t2048 := func(c *Config) {}
	runKernel(t, []kernelRow{
		{spec: "K1", name: "eff_and_ratio_below_is_bypass", cfg: t2048, isl: 4096, gpu: 192, want: bypass(ReasonBypassISL, 1024), wantCached: 3072},
		{spec: "K2", name: "cold_prompt_ratio_1_is_remote", isl: 1000, want: remoteO(ReasonRemoteRatioTooHigh, 1000)},
		{spec: "K3", name: "eff_above_T_is_remote", isl: 20000, gpu: 1000, want: remoteO(ReasonRemoteISLTooLong, 4000)},
		{spec: "K4", name: "both_fail_reports_absolute_first", isl: 10000, want: remoteO(ReasonRemoteISLTooLong, 10000)},
		{spec: "K5", name: "eff_equal_to_T_is_remote_strict", isl: 8192, gpu: 384, want: remoteO(ReasonRemoteISLTooLong, 2048)},
		{spec: "K5", name: "eff_one_below_T_is_bypass", isl: 8191, gpu: 384, want: bypass(ReasonBypassISL, 2047)},
		{spec: "K6", name: "ratio_exactly_R_is_remote_strict", isl: 1600, gpu: 30, want: remoteO(ReasonRemoteRatioTooHigh, 1120)},
		{spec: "K7", name: "ratio_just_below_R_is_bypass", isl: 1600, gpu: 31, want: bypass(ReasonBypassISL, 1104)},
		{spec: "K8", name: "partial_tail_counted_in_eff", isl: 1030, gpu: 64, want: bypass(ReasonBypassISL, 6)},
		// vLLM computes the last prompt token itself: its cache hit is capped at ISL−1 tokens,
		// whole blocks only. Credit beyond that (here more blocks than the prompt has) is cut.
		{spec: "K9", name: "cached_capped_below_last_token", isl: 100, gpu: 12, disk: 2, want: bypass(ReasonBypassISL, 4), wantCached: 96},
		{spec: "K9", name: "exact_block_multiple_credits_one_block_less", isl: 4096, gpu: 256, want: bypass(ReasonBypassISL, 16), wantCached: 4080},
		{spec: "K9", name: "one_token_past_a_block_credits_every_block", isl: 4097, gpu: 256, want: bypass(ReasonBypassISL, 1), wantCached: 4096},
		{spec: "K10", name: "empty_prompt_is_remote_no_tokens", isl: 0,
			want: outcome{Route: RoutePrefill, Reason: ReasonRemoteNoTokens, Decode: "d0", Prefill: "p0"}},
		{spec: "K11", name: "T_zero_disables_ISL_path", cfg: func(c *Config) { c.Disagg.EffISLThreshold = 0 }, isl: 4096, gpu: 256, want: remoteO(ReasonRemoteISLTooLong, 16)},
		{spec: "K12", name: "R_one_still_rejects_ratio_one", cfg: func(c *Config) { c.Disagg.EffISLRatioThreshold = 1 }, isl: 1000, want: remoteO(ReasonRemoteRatioTooHigh, 1000)},
		{spec: "K12", name: "R_one_accepts_ratio_below_one", cfg: func(c *Config) { c.Disagg.EffISLRatioThreshold = 1 }, isl: 1000, gpu: 1, want: bypass(ReasonBypassISL, 984)},
		{spec: "K13", name: "R_zero_disables_ISL_path", cfg: func(c *Config) { c.Disagg.EffISLRatioThreshold = 0 }, isl: 4096, gpu: 255, want: remoteO(ReasonRemoteRatioTooHigh, 16)},
		{spec: "K14", name: "host_blocks_weighted_0.75", isl: 300, gpu: 10, host: 4, want: bypass(ReasonBypassISL, 92), wantCached: 208},
		{spec: "K14", name: "disk_blocks_weighted_0.25", isl: 300, gpu: 10, disk: 4, want: bypass(ReasonBypassISL, 124), wantCached: 176},
		{spec: "K15", name: "silent_decode_overrides_ratio_reason", isl: 1000, silent: true,
			want: outcome{Route: RoutePrefill, Reason: ReasonRemoteNoKVEvents, Gate: GateDeclinedByPolicy, Decode: "d0", Prefill: "p0", Eff: 1000, Silent: true}},
		{spec: "K15", name: "silent_decode_gets_no_overlap_credit", isl: 4096, gpu: 192, silent: true,
			want: outcome{Route: RoutePrefill, Reason: ReasonRemoteNoKVEvents, Gate: GateDeclinedByPolicy, Decode: "d0", Prefill: "p0", Eff: 4096, Silent: true}},
	})
}

func TestEvaluateKernelK10(t *testing.T) {
	// The kernel alone: ISL 0, cached 0 ⇒ eff 0, ratio 0/max(0,1) = 0 ⇒ bypass_isl (spec K10).
	in := Inputs{Eff: 0, Ratio: 0, EffISLThreshold: 2048, RatioThreshold: 0.7}
	if got := evaluate(ISLBounding, &in); got != ReasonBypassISL {
		t.Fatalf("evaluate = %v, want bypass_isl", got)
	}
}

func TestDecidePrefillBusy(t *testing.T) {
	hot := func(eff int) outcome { return withBusy(bypass(ReasonBypassPrefillBusy, eff), BusyTrue) }
	cold := func(eff int) outcome { return withBusy(remoteO(ReasonRemotePrefillNotBusy, eff), BusyFalse) }
	runKernel(t, []kernelRow{
		{spec: "B1", name: "apt_equal_to_budget_not_busy", cfg: policyIs(PrefillLoad, 0.5), isl: 1000, pre: WorkerLoad{ActivePrefillTokens: 4096}, want: cold(1000)},
		{spec: "B2", name: "apt_one_above_budget_busy", cfg: policyIs(PrefillLoad, 0.5), isl: 1000, pre: WorkerLoad{ActivePrefillTokens: 4097}, want: hot(1000)},
		{spec: "B3", name: "mnbt_unknown_counts_as_10M", cfg: policyIs(PrefillLoad, 1), isl: 1000, pre: WorkerLoad{ActivePrefillTokens: 200000, MaxBatchedTokens: -1}, want: cold(1000)},
		{spec: "B3", name: "mnbt_unknown_busy_above_10M", cfg: policyIs(PrefillLoad, 1), isl: 1000, pre: WorkerLoad{ActivePrefillTokens: 10_000_001, MaxBatchedTokens: -1}, want: hot(1000)},
		{spec: "B4", name: "unset_theta_inherits_queue_threshold", cfg: func(c *Config) {
			c.Disagg.Policy, c.QueueThreshold = PrefillLoad, Set(0.8)
		}, isl: 1000, pre: WorkerLoad{ActivePrefillTokens: 6554}, want: hot(1000)},
		{spec: "B4", name: "inherited_threshold_at_budget_not_busy", cfg: func(c *Config) {
			c.Disagg.Policy, c.QueueThreshold = PrefillLoad, Set(0.5)
		}, isl: 1000, pre: WorkerLoad{ActivePrefillTokens: 4096}, want: cold(1000)},
		{spec: "B6", name: "theta_16_at_budget_not_busy", cfg: policyIs(PrefillLoad, 16), isl: 1000, pre: WorkerLoad{ActivePrefillTokens: 131072}, want: cold(1000)},
		{spec: "B6", name: "theta_16_above_budget_busy", cfg: policyIs(PrefillLoad, 16), isl: 1000, pre: WorkerLoad{ActivePrefillTokens: 131073}, want: hot(1000)},
		{spec: "L1", name: "busy_is_bypass_prefill_busy", cfg: policyIs(PrefillLoad, 1), isl: 1000, pre: WorkerLoad{ActivePrefillTokens: 9000}, want: hot(1000)},
		{spec: "L2", name: "not_busy_is_remote_prefill_not_busy", cfg: policyIs(PrefillLoad, 1), isl: 1000, want: cold(1000)},
		{spec: "L3", name: "preview_error_is_busy_unknown", cfg: policyIs(PrefillLoad, 1), isl: 1000, misalignP: true,
			want: withBusy(outcome{Route: RoutePrefill, Reason: ReasonRemotePrefillBusyUnknown, Gate: GateDeclinedByPolicy, Decode: "d0", Prefill: "p0", Eff: 1000}, BusyUnknown)},
		{spec: "L5", name: "long_cold_prompt_bypasses_when_busy", cfg: policyIs(PrefillLoad, 1), isl: 100000, pre: WorkerLoad{ActivePrefillTokens: 9000}, want: hot(100000)},
		{spec: "L5", name: "silent_decode_does_not_stop_load_bypass", cfg: policyIs(PrefillLoad, 1), isl: 1000, silent: true, pre: WorkerLoad{ActivePrefillTokens: 9000},
			want: func() outcome { o := hot(1000); o.Silent = true; return o }()},
	})
}

func TestDecideISLOrLoad(t *testing.T) {
	k1 := func(r kernelRow) kernelRow { r.isl, r.gpu = 4096, 192; return r }
	k3 := func(r kernelRow) kernelRow { r.isl, r.gpu = 20000, 1000; return r }
	busyP := WorkerLoad{ActivePrefillTokens: 9000}
	p := policyIs(ISLOrLoad, 1)
	runKernel(t, []kernelRow{
		k1(kernelRow{spec: "O1", name: "isl_ok_not_busy_is_bypass_isl", cfg: p, want: withBusy(bypass(ReasonBypassISL, 1024), BusyFalse)}),
		k1(kernelRow{spec: "O2", name: "isl_ok_and_busy", cfg: p, pre: busyP, want: withBusy(bypass(ReasonBypassISLAndPrefillBusy, 1024), BusyTrue)}),
		k1(kernelRow{spec: "O3", name: "isl_ok_unknown_is_bypass_isl", cfg: p, misalignP: true, want: withBusy(bypass(ReasonBypassISL, 1024), BusyUnknown)}),
		k3(kernelRow{spec: "O4", name: "isl_fails_busy_is_bypass_prefill_busy", cfg: p, pre: busyP, want: withBusy(bypass(ReasonBypassPrefillBusy, 4000), BusyTrue)}),
		{spec: "O5", name: "isl_fails_not_busy_keeps_isl_reason", cfg: p, isl: 1000, want: withBusy(remoteO(ReasonRemoteRatioTooHigh, 1000), BusyFalse)},
		{spec: "O6", name: "isl_fails_unknown_keeps_isl_reason", cfg: p, isl: 10000, misalignP: true, want: withBusy(remoteO(ReasonRemoteISLTooLong, 10000), BusyUnknown)},
		{spec: "O5", name: "silent_decode_not_busy_is_no_kv_events", cfg: p, isl: 1000, silent: true,
			want: func() outcome {
				o := withBusy(remoteO(ReasonRemoteNoKVEvents, 1000), BusyFalse)
				o.Silent = true
				return o
			}()},
	})
}

func TestDecideGuard(t *testing.T) {
	g := func(extra func(*Config)) func(*Config) {
		return func(c *Config) {
			c.Disagg.DecodeBusyThreshold = Set(0.8)
			if extra != nil {
				extra(c)
			}
		}
	}
	d := func(newBlocks, kvcap int64) WorkerLoad {
		return WorkerLoad{ActiveDecodeBlocks: 7900, NewBlocks: newBlocks, KVCapacityBlocks: kvcap}
	}
	pass := func(r Reason, eff int) outcome { o := bypass(r, eff); o.Gate = GateAllowedDecodeNotBusy; return o }
	deny := func(r Reason, gate Gate, eff int) outcome {
		return outcome{Route: RoutePrefill, Reason: r, Gate: gate, Decode: "d0", Prefill: "p0", Eff: eff}
	}
	runKernel(t, []kernelRow{
		{spec: "G1", name: "policy_remote_never_reads_capacity", cfg: g(nil), isl: 1000, dec: d(100, -1), want: remoteO(ReasonRemoteRatioTooHigh, 1000)},
		{spec: "G2", name: "theta_unset_allows_busy_worker", isl: 4096, gpu: 192, dec: d(5000, 10000), want: bypass(ReasonBypassISL, 1024)},
		{spec: "G3", name: "pdb_equal_budget_is_bypass", cfg: g(nil), isl: 4096, gpu: 192, dec: d(100, 10000), want: pass(ReasonBypassISL, 1024)},
		{spec: "G4", name: "pdb_one_above_budget_is_decode_busy", cfg: g(nil), isl: 4096, gpu: 192, dec: d(101, 10000),
			want: deny(ReasonRemoteDecodeBusy, GateDeniedDecodeBusy, 1024)},
		{spec: "G5", name: "capacity_unknown_denies", cfg: g(nil), isl: 4096, gpu: 192, dec: d(100, -1),
			want: deny(ReasonRemoteCapacityUnknown, GateDeniedDecodeBusyUnknown, 1024)},
		{spec: "G6", name: "capacity_zero_sentinel_denies", cfg: g(nil), isl: 4096, gpu: 192, dec: WorkerLoad{ActiveDecodeBlocks: 7900, NewBlocks: 100, KVCapacityBlocks: 0},
			want: deny(ReasonRemoteCapacityUnknown, GateDeniedDecodeBusyUnknown, 1024)},
		{spec: "G7", name: "theta_zero_denies_any_block", cfg: func(c *Config) { c.Disagg.DecodeBusyThreshold = Set(0) }, isl: 4096, gpu: 192,
			dec: WorkerLoad{NewBlocks: 1, KVCapacityBlocks: 10000}, want: deny(ReasonRemoteDecodeBusy, GateDeniedDecodeBusy, 1024)},
		{spec: "G8", name: "shared_prefix_blocks_not_double_counted", cfg: g(nil), isl: 4096, gpu: 192, dec: d(10, 10000), want: pass(ReasonBypassISL, 1024)},
		{spec: "G9", name: "load_bypass_also_guarded", cfg: g(policyIs(PrefillLoad, 1)), isl: 1000, dec: d(101, 10000), pre: WorkerLoad{ActivePrefillTokens: 9000},
			want: withBusy(deny(ReasonRemoteDecodeBusy, GateDeniedDecodeBusy, 1000), BusyTrue)},
	})
}

// TestDecidePrefillPoolRejects is L4: every prefill worker over the queue threshold (the pool
// would reject) ⇒ busy, even where apt(p) <= θp·mnbt(p).
func TestDecidePrefillPoolRejects(t *testing.T) {
	cfg := enabledConfig()
	cfg.Disagg.Policy, cfg.Disagg.PrefillBusyThreshold, cfg.QueueThreshold = PrefillLoad, Set(4), Set(0.5)
	snap := &Snapshot{Decode: []WorkerLoad{{ID: "d0", KVCapacityBlocks: 100}},
		Prefill: []WorkerLoad{{ID: "p0", MaxBatchedTokens: 100, ActivePrefillTokens: 51}, {ID: "p1", MaxBatchedTokens: 200, ActivePrefillTokens: 101}}}
	in := &Input{Now: testNow, ISL: 50, Decode: []Signal{{Worker: "d0", Stream: live()}}}
	got := Decide(&cfg, in, snap, newRand(3))
	if got.Reason != ReasonBypassPrefillBusy || !got.Inputs.PrefillRejected || got.Inputs.PrefillBusy != BusyTrue {
		t.Fatalf("L4: got reason %v rejected %v busy %v, want bypass_prefill_busy, rejected, true", got.Reason, got.Inputs.PrefillRejected, got.Inputs.PrefillBusy)
	}
	// One worker at (not above) the queue threshold: no rejection, and p1 is below θp.
	snap.Prefill[1].ActivePrefillTokens = 100
	got = Decide(&cfg, in, snap, newRand(3))
	if got.Inputs.PrefillRejected || got.Reason != ReasonRemotePrefillNotBusy {
		t.Fatalf("L4 control: got %v rejected %v, want remote_prefill_not_busy", got.Reason, got.Inputs.PrefillRejected)
	}
}

// TestDecideExplicitThetaBeatsQueueThreshold is B5 where it changes the outcome: p0 (chosen for
// its prefix) holds 16384 tokens ≤ 2.0·8192, so it is not busy under θp = 2.0 although it would
// be under the queue threshold 0.8; p1 keeps the pool from rejecting.
func TestDecideExplicitThetaBeatsQueueThreshold(t *testing.T) {
	snap := &Snapshot{Decode: []WorkerLoad{{ID: "d0", KVCapacityBlocks: 100}},
		Prefill: []WorkerLoad{{ID: "p0", MaxBatchedTokens: 8192, ActivePrefillTokens: 16384}, {ID: "p1", MaxBatchedTokens: 8192}}}
	in := &Input{Now: testNow, ISL: 1000, Decode: []Signal{{Worker: "d0", Stream: live()}},
		Prefill: []Signal{{Worker: "p0", GPU: 2000, Stream: live()}, {Worker: "p1", Stream: live()}}}
	for _, tc := range []struct {
		spec  string
		theta Threshold
		want  Reason
	}{{"B5_explicit_2.0", Set(2), ReasonRemotePrefillNotBusy}, {"B4_inherited_0.8", Threshold{}, ReasonBypassPrefillBusy}} {
		t.Run(tc.spec, func(t *testing.T) {
			cfg := enabledConfig()
			cfg.Disagg.Policy, cfg.Disagg.PrefillBusyThreshold, cfg.QueueThreshold = PrefillLoad, tc.theta, Set(0.8)
			mustValid(t, cfg)
			got := Decide(&cfg, in, snap, newRand(1))
			if got.Reason != tc.want || got.Inputs.PreviewPrefill != "p0" || got.Inputs.PrefillRejected {
				t.Fatalf("got %v (p=%s rejected=%v budget=%v), want %v on p0", got.Reason, got.Inputs.PreviewPrefill, got.Inputs.PrefillRejected, got.Inputs.PrefillBudget, tc.want)
			}
		})
	}
}

// TestDecideISLBoundingNeverPreviewsPrefill is P0: isl_bounding makes zero prefill-preview calls.
func TestDecideISLBoundingNeverPreviewsPrefill(t *testing.T) {
	cfg := enabledConfig()
	cfg.Disagg.PrefillBusyThreshold = Set(0) // would make any load busy if it were read
	for _, isl := range []int{1, 1000, 4096, 100000} {
		snap := oneEach(WorkerLoad{KVCapacityBlocks: 100}, WorkerLoad{ActivePrefillTokens: 1 << 40})
		in := &Input{Now: testNow, ISL: isl, Decode: []Signal{{Worker: "d0", GPU: isl / 32, Stream: live()}}}
		got := Decide(&cfg, in, snap, newRand(1))
		if got.Inputs.PrefillPreviewed || got.Inputs.PrefillBusy != BusyNotEvaluated || got.Inputs.PrefillBudget != 0 {
			t.Fatalf("P0 isl=%d: prefill previewed=%v busy=%v", isl, got.Inputs.PrefillPreviewed, got.Inputs.PrefillBusy)
		}
	}
}

func TestDecideOrchestration(t *testing.T) {
	two := func() *Snapshot {
		return &Snapshot{Decode: []WorkerLoad{{ID: "d0", KVCapacityBlocks: 1000}, {ID: "d1", KVCapacityBlocks: 1000}},
			Prefill: []WorkerLoad{{ID: "p0"}, {ID: "p1"}}}
	}
	sigs := []Signal{{Worker: "d0", Stream: live()}, {Worker: "d1", GPU: 250, Stream: live()}}
	tests := []struct {
		spec, name string
		cfg        func(*Config)
		snap       func() *Snapshot
		in         Input
		want       outcome
		wantErr    error
	}{
		{spec: "R2", name: "empty_prefill_pool_is_aggregated", cfg: func(c *Config) { c.Disagg.Policy, c.Disagg.PrefillBusyThreshold = PrefillLoad, Set(1) },
			snap: func() *Snapshot { s := two(); s.Prefill = nil; return s }, in: Input{ISL: 4096, Decode: sigs},
			want: outcome{Route: RouteDecode, Reason: ReasonNoPrefillWorkers, Decode: "d1", Eff: 96}},
		{spec: "R2", name: "aggregated_even_when_feature_off", cfg: func(c *Config) { c.Enabled, c.DisaggGiven = false, false },
			snap: func() *Snapshot { s := two(); s.Prefill = nil; return s }, in: Input{ISL: 4096, Decode: sigs},
			want: outcome{Route: RouteDecode, Reason: ReasonNoPrefillWorkers, Decode: "d1", Eff: 96}},
		{spec: "R3", name: "feature_off_is_remote_disabled_load_only", cfg: func(c *Config) { c.Enabled, c.DisaggGiven = false, false },
			snap: func() *Snapshot { s := two(); s.Decode[0].ActiveDecodeBlocks = 10; return s }, in: Input{ISL: 4096, Decode: sigs},
			want: outcome{Route: RoutePrefill, Reason: ReasonRemoteDisabled, Decode: "d1", Prefill: "p0"}},
		{spec: "R4", name: "prefill_pin_is_remote_prefill_pinned", snap: two, in: Input{ISL: 4096, Decode: sigs, Pin: Pin{Prefill: "p1"}},
			want: outcome{Route: RoutePrefill, Reason: ReasonRemotePrefillPinned, Decode: "d1", Prefill: "p1"}},
		{spec: "R4", name: "decode_pin_restricts_preview", snap: two, in: Input{ISL: 4096, Decode: sigs, Pin: Pin{Decode: "d0"}},
			want: outcome{Route: RoutePrefill, Reason: ReasonRemoteISLTooLong, Gate: GateDeclinedByPolicy, Decode: "d0", Prefill: "p0", Eff: 4096}},
		{spec: "R4", name: "unknown_decode_pin_is_unresolved", snap: two, in: Input{ISL: 4096, Decode: sigs, Pin: Pin{Decode: "d9"}},
			want: outcome{Route: RoutePrefill, Reason: ReasonRemoteDecodePinUnresolved, Decode: "d1", Prefill: "p0"}, wantErr: ErrPinUnresolved},
		{spec: "R5", name: "empty_decode_pool_is_decode_rejected", snap: func() *Snapshot { s := two(); s.Decode = nil; return s }, in: Input{ISL: 4096},
			want: outcome{Route: RoutePrefill, Reason: ReasonRemoteDecodeRejected, Prefill: "p0"}, wantErr: ErrNoTarget},
		{spec: "R6", name: "signals_mismatch_is_policy_error", snap: two, in: Input{ISL: 4096, Decode: sigs[:1]},
			want: outcome{Route: RoutePrefill, Reason: ReasonRemotePolicyError, Decode: "d0", Prefill: "p0"}, wantErr: ErrSignalsMismatch},
		{spec: "R6", name: "signals_order_mismatch_is_policy_error", snap: two, in: Input{ISL: 4096, Decode: []Signal{sigs[1], sigs[0]}},
			want: outcome{Route: RoutePrefill, Reason: ReasonRemotePolicyError, Decode: "d0", Prefill: "p0"}, wantErr: ErrSignalsMismatch},
	}
	for _, tc := range tests {
		t.Run(tc.spec+"_"+tc.name, func(t *testing.T) {
			cfg := enabledConfig()
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			mustValid(t, cfg)
			tc.in.Now = testNow
			got := Decide(&cfg, &tc.in, tc.snap(), nil)
			if g := outcomeOf(got); g != tc.want {
				t.Errorf("Decide:\n got  %+v\n want %+v", g, tc.want)
			}
			if got.Inputs.Err != tc.wantErr {
				t.Errorf("Inputs.Err = %v, want %v", got.Inputs.Err, tc.wantErr)
			}
		})
	}
}

func TestDecideDemote(t *testing.T) {
	cfg := enabledConfig()
	cfg.Disagg.DecodeBusyThreshold = Set(0.8)
	// d0 holds the prefix; d1 is idle. The bypass previews d0; its remote-decode choice is d0 too.
	snap := &Snapshot{Decode: []WorkerLoad{{ID: "d0", KVCapacityBlocks: 1000}, {ID: "d1", KVCapacityBlocks: 1000}},
		Prefill: []WorkerLoad{{ID: "p0"}}}
	in := &Input{Now: testNow, ISL: 4096, Decode: []Signal{{Worker: "d0", GPU: 192, Stream: live()}, {Worker: "d1", Stream: live()}}}
	dec := Decide(&cfg, in, snap, nil)
	if dec.Reason != ReasonBypassISL || !dec.Guard.Enabled || dec.DecodeID != "d0" {
		t.Fatalf("setup: %v on %s guard %+v", dec.Reason, dec.DecodeID, dec.Guard)
	}
	if dec.Route != RouteDecode || dec.DecodeID != "d0" || dec.PrefillTokens != 1024 || dec.Guard != cfg.Guard() {
		t.Fatalf("bypass decision = %+v", dec)
	}
	for _, tc := range []struct {
		spec       string
		reason     Reason
		gate       Gate
		wantReason Reason
		wantDecode string
	}{{"§5.3_commit_denied_keeps_cache_affine_decode", ReasonRemoteDecodeBusy, GateDeniedDecodeBusy, ReasonRemoteDecodeBusy, "d0"},
		{"§5.3_capacity_unknown_at_commit", ReasonRemoteCapacityUnknown, GateDeniedDecodeBusyUnknown, ReasonRemoteCapacityUnknown, "d0"},
		{"R7_worker_gone_is_excluded", ReasonRemotePolicyError, GateAllowedDecodeNotBusy, ReasonRemotePolicyError, "d1"},
		{"bypass_reason_becomes_policy_error", ReasonBypassISL, GateAllowedDecodeNotBusy, ReasonRemotePolicyError, "d1"}} {
		t.Run(tc.spec, func(t *testing.T) {
			d := dec
			Demote(&cfg, in, snap, nil, &d, tc.reason)
			if d.Route != RoutePrefill || d.Reason != tc.wantReason || d.Gate != tc.gate || d.PrefillID != "p0" || d.DecodeID != tc.wantDecode || d.Guard.Enabled {
				t.Fatalf("Demote = route %v reason %v gate %v p %q d %q guard %v", d.Route, d.Reason, d.Gate, d.PrefillID, d.DecodeID, d.Guard)
			}
			if d.PrefillTokens != 4096 {
				t.Fatalf("remote prefill tokens = %d, want 4096", d.PrefillTokens)
			}
		})
	}
}

func TestDecisionReporting(t *testing.T) {
	cfg := enabledConfig()
	cfg.Disagg.Policy, cfg.Disagg.PrefillBusyThreshold, cfg.Disagg.DecodeBusyThreshold = ISLOrLoad, Set(1), Set(0.8)
	snap := oneEach(WorkerLoad{KVCapacityBlocks: -1}, WorkerLoad{MaxBatchedTokens: 100})
	in := &Input{Now: testNow, ISL: 4096, Decode: []Signal{{Worker: "d0", GPU: 192, Stream: live()}}, Prefill: []Signal{{Worker: "zz"}}}
	dec := Decide(&cfg, in, snap, nil)
	// O3 with capacity unknown: both unknown counters fire, the decision goes remote.
	if p, d := dec.UnknownSignals(); !p || !d || dec.Reason != ReasonRemoteCapacityUnknown {
		t.Fatalf("UnknownSignals = %v,%v reason %v", p, d, dec.Reason)
	}
	if got := string(dec.AppendHeader(nil)); got != "route=prefill;reason=remote_capacity_unknown;isl=4096;eff_isl=1024;overlap_blocks=192" {
		t.Fatalf("header = %q", got)
	}
	for _, r := range Reasons() {
		if r.String() == "unknown" || r.String() == "" {
			t.Fatalf("reason %d has no name", r)
		}
	}
	if len(Reasons()) != 27 {
		t.Fatalf("%d reasons, want the spec's 17 plus passthrough, failure_open, the slo policy's six, request_chat_template and long_pretoken", len(Reasons()))
	}
}

// TestDecideAllocatesNothing holds Decide to zero allocations on every path, including the
// error paths that drop misaligned signals.
func TestDecideAllocatesNothing(t *testing.T) {
	base := enabledConfig()
	base.Disagg.Policy, base.Disagg.PrefillBusyThreshold, base.Disagg.DecodeBusyThreshold = ISLOrLoad, Set(1), Set(0.8)
	snap, in := benchFixture(16)
	bad := *in
	bad.Prefill = bad.Prefill[:3]
	worse := *in
	worse.Decode = worse.Decode[1:]
	soft := base
	soft.Selection.Temperature = 0.7
	off := base
	off.Enabled = false
	noPrefill := *snap
	noPrefill.Prefill = nil
	rng := newRand(1)
	for _, tc := range []struct {
		name string
		cfg  *Config
		in   *Input
		snap *Snapshot
	}{{"remote", &base, in, snap}, {"misaligned_prefill", &base, &bad, snap}, {"misaligned_decode", &base, &worse, snap},
		{"softmax", &soft, in, snap}, {"disabled", &off, in, snap}, {"aggregated", &base, in, &noPrefill}} {
		if a := testing.AllocsPerRun(100, func() { Decide(tc.cfg, tc.in, tc.snap, rng) }); a != 0 {
			t.Errorf("%s: %v allocs per decision", tc.name, a)
		}
	}
	var zero Config
	if d := Decide(&zero, in, snap, rng); d.Reason != ReasonRemotePolicyError || d.Inputs.Err != ErrInvalidConfig {
		t.Fatalf("unvalidated config: %v %v", d.Reason, d.Inputs.Err)
	}
	if err := zero.Validate(); err != nil || zero.BlockSize != DefaultBlockSize || zero.Disagg.Policy != ISLBounding {
		t.Fatalf("Validate on the zero config: %v, block size %d policy %q", err, zero.BlockSize, zero.Disagg.Policy)
	}
}

// TestFallbackSpreadsByLoad: a fallback goes to the least-loaded decode worker, ties broken by
// the random source (not always the first), and never to a worker outside the snapshot.
func TestFallbackSpreadsByLoad(t *testing.T) {
	cfg := enabledConfig()
	snap := &Snapshot{Decode: []WorkerLoad{{ID: "d0", ActivePrefillTokens: 4096}, {ID: "d1"}, {ID: "d2", ActiveDecodeBlocks: 10}},
		Prefill: []WorkerLoad{{ID: "p0"}}}
	dec := Fallback(&cfg, &Input{Now: testNow}, snap, newRand(1), ReasonPassthrough)
	if dec.Route != RouteDecode || dec.DecodeID != "d1" || dec.Reason != ReasonPassthrough || dec.Prefill != -1 {
		t.Fatalf("fallback = %v %v on %q (prefill %d), want passthrough on d1", dec.Route, dec.Reason, dec.DecodeID, dec.Prefill)
	}
	idle := &Snapshot{Decode: []WorkerLoad{{ID: "d0"}, {ID: "d1"}, {ID: "d2"}}}
	seen := map[string]int{}
	rng := newRand(2)
	for range 300 {
		seen[Fallback(&cfg, &Input{Now: testNow}, idle, rng, ReasonFailureOpen).DecodeID]++
	}
	if len(seen) != 3 {
		t.Fatalf("ties on an idle pool went to %v, want all three workers", seen)
	}
	if d := Fallback(&cfg, &Input{Now: testNow}, &Snapshot{}, rng, ReasonPassthrough); d.Decode != -1 || d.Routable() {
		t.Fatalf("empty pool: %+v", d)
	}
}
