package policy

import (
	"math"
	"testing"
	"time"
)

func selectorFor(cfg *Config, isl int, loads []WorkerLoad, sigs []Signal, m mode) selector {
	return newSelector(cfg, &Input{Now: testNow, ISL: isl}, loads, sigs, m)
}

func liveSigs(gpu ...int) []Signal {
	out := make([]Signal, len(gpu))
	for i, g := range gpu {
		out[i] = Signal{Worker: string(rune('a' + i)), GPU: g, Stream: live()}
	}
	return out
}

func TestSelectCost(t *testing.T) {
	cfg := enabledConfig()
	tests := []struct {
		spec, name string
		isl        int
		mode       mode
		load       WorkerLoad
		sig        Signal
		want       float64
	}{
		{spec: "§6.1", name: "bypass_prefill_plus_decode", isl: 160, mode: modeBypass, load: WorkerLoad{ActivePrefillTokens: 32, ActiveDecodeBlocks: 7, NewBlocks: 3}, sig: Signal{GPU: 4, Stream: live()}, want: (192.0/16 - 4) + 10},
		{spec: "§6.1", name: "prefill_term_clamps_at_zero", isl: 160, mode: modeBypass, load: WorkerLoad{NewBlocks: 1}, sig: Signal{GPU: 50, Stream: live()}, want: 1},
		{spec: "S6", name: "host_blocks_credit_0.75", isl: 160, mode: modePrefill, sig: Signal{Host: 4, Stream: live()}, want: 10 - 3},
		{spec: "S6", name: "disk_blocks_credit_0.25", isl: 160, mode: modePrefill, sig: Signal{Disk: 4, Stream: live()}, want: 10 - 1},
		{spec: "S7", name: "remote_decode_clamps_at_zero", isl: 160, mode: modeRemoteDecode, load: WorkerLoad{ActiveDecodeBlocks: 2}, sig: Signal{GPU: 40, Stream: live()}, want: 0},
		{spec: "S7", name: "remote_decode_ceil_blocks", isl: 161, mode: modeRemoteDecode, load: WorkerLoad{ActiveDecodeBlocks: 2}, sig: Signal{GPU: 3, Stream: live()}, want: 2 + 11 - 3},
		{spec: "S8", name: "prefill_mode_ignores_blocks", isl: 160, mode: modePrefill, load: WorkerLoad{ActiveDecodeBlocks: 1e6, NewBlocks: 1e6}, sig: Signal{Stream: live()}, want: 10},
		{spec: "§8.3", name: "down_stream_gets_no_credit", isl: 160, mode: modePrefill, sig: Signal{GPU: 5, Host: 4}, want: 10},
	}
	for _, tc := range tests {
		t.Run(tc.spec+"_"+tc.name, func(t *testing.T) {
			s := selectorFor(&cfg, tc.isl, []WorkerLoad{tc.load}, []Signal{tc.sig}, tc.mode)
			if got := s.cost(0); math.Abs(got-tc.want) > 1e-9 {
				t.Fatalf("cost = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestSelectDocsExample is S1: raw prefill 10 blocks each; W1 overlap 2 decode 10 ⇒ 18,
// W2 overlap 5 decode 5 ⇒ 10 (chosen), W3 overlap 8 decode 9 ⇒ 11.
func TestSelectDocsExample(t *testing.T) {
	cfg := enabledConfig()
	loads := []WorkerLoad{{ActiveDecodeBlocks: 10}, {ActiveDecodeBlocks: 5}, {ActiveDecodeBlocks: 9}}
	s := selectorFor(&cfg, 160, loads, liveSigs(2, 5, 8), modeBypass)
	for i, want := range []float64{18, 10, 11} {
		if got := s.cost(i); got != want {
			t.Errorf("S1 cost(W%d) = %v, want %v", i+1, got, want)
		}
	}
	if got := s.pick(newRand(9)); got != 1 {
		t.Fatalf("S1 pick = W%d, want W2", got+1)
	}
}

func TestSelectStaleStreams(t *testing.T) {
	cfg := enabledConfig()
	old := testNow.Add(-cfg.Silence.After)
	tests := []struct {
		spec, name string
		stream     Stream
		wantSilent bool
	}{
		{"§8.3", "subscription_down_is_silent", Stream{LastStored: testNow}, true},
		{"§8.3", "quiet_beyond_silence_with_traffic_is_silent", Stream{Connected: true, LastStored: old.Add(-time.Nanosecond), RoutedSinceStored: 20}, true},
		{"§8.3", "quiet_exactly_silence_is_live_strict", Stream{Connected: true, LastStored: old, RoutedSinceStored: 20}, false},
		{"§8.3", "quiet_with_too_few_requests_is_live", Stream{Connected: true, LastStored: old.Add(-time.Hour), RoutedSinceStored: 19}, false},
		{"§8.3", "never_stored_with_traffic_is_silent", Stream{Connected: true, RoutedSinceStored: 20}, true},
	}
	for _, tc := range tests {
		t.Run(tc.spec+"_"+tc.name, func(t *testing.T) {
			if got := Silent(tc.stream, testNow, cfg.Silence); got != tc.wantSilent {
				t.Fatalf("Silent = %v, want %v", got, tc.wantSilent)
			}
			// The hot worker a holds 8 blocks but only wins while its stream is trusted.
			sigs := liveSigs(8, 0)
			sigs[0].Stream = tc.stream
			loads := []WorkerLoad{{}, {}}
			s := selectorFor(&cfg, 160, loads, sigs, modeBypass)
			if tc.wantSilent {
				if s.cost(0) != s.cost(1) {
					t.Fatalf("silent worker kept its credit: cost %v vs %v", s.cost(0), s.cost(1))
				}
				return
			}
			if got := s.pick(newRand(1)); got != 0 {
				t.Fatalf("pick = %d, want the hot live worker 0", got)
			}
		})
	}
}

func TestSelectMediumWeights(t *testing.T) {
	cfg := enabledConfig()
	// Worker a: 4 host blocks; worker b: 10 disk blocks. Defaults: 3 vs 2.5 ⇒ a.
	sigs := []Signal{{Worker: "a", Host: 4, Stream: live()}, {Worker: "b", Disk: 10, Stream: live()}}
	loads := []WorkerLoad{{}, {}}
	s := selectorFor(&cfg, 160, loads, sigs, modePrefill)
	if got := s.pick(nil); got != 0 {
		t.Fatalf("default weights pick %d, want 0 (host 0.75 beats disk 0.25)", got)
	}
	cfg.Selection.DiskWeight = 0.5 // 3 vs 5 ⇒ b
	s = selectorFor(&cfg, 160, loads, sigs, modePrefill)
	if got := s.pick(nil); got != 1 {
		t.Fatalf("disk weight 0.5 pick %d, want 1", got)
	}
	cfg = enabledConfig()
	cfg.Selection.CreditWeight = 0 // device overlap ignored: a (8 GPU) ties b (0)
	s = selectorFor(&cfg, 160, loads, liveSigs(8, 0), modePrefill)
	if s.cost(0) != s.cost(1) {
		t.Fatalf("credit_weight 0: costs %v %v differ", s.cost(0), s.cost(1))
	}
}

func TestSelectActiveRequestWeightAndDecay(t *testing.T) {
	cfg := enabledConfig()
	cfg.Selection.ActiveRequestWeight = 2
	s := selectorFor(&cfg, 160, []WorkerLoad{{ActiveRequests: 3}}, nil, modeRemoteDecode)
	if got := s.cost(0); got != 10+6 {
		t.Fatalf("active_request_weight: cost %v, want 16", got)
	}
	cfg = enabledConfig()
	cfg.Selection.CreditDecay = 1
	// b is 160 tokens (10 blocks) above the minimum apt; request 10 blocks ⇒ decay 1/(1+1) ⇒ credit 4.
	loads := []WorkerLoad{{}, {ActivePrefillTokens: 160}}
	s = selectorFor(&cfg, 160, loads, liveSigs(0, 8), modePrefill)
	if got := s.cost(1); got != 20-4 {
		t.Fatalf("credit_decay: cost %v, want 16", got)
	}
}

// chiSquare returns the statistic of counts against a uniform expectation.
func chiSquare(counts []int, n int) float64 {
	exp := float64(n) / float64(len(counts))
	x := 0.0
	for _, c := range counts {
		x += (float64(c) - exp) * (float64(c) - exp) / exp
	}
	return x
}

// TestSelectTiesUniform is S2 (T=0, three-way tie) and S4 (T>0, equal costs): 30,000 seeded
// draws, chi-square with 2 degrees of freedom below 9.21 (p > 0.01).
func TestSelectTiesUniform(t *testing.T) {
	for _, tc := range []struct {
		spec string
		temp float64
	}{{"S2_argmin_ties", 0}, {"S4_softmax_equal_costs", 1.5}} {
		t.Run(tc.spec, func(t *testing.T) {
			cfg := enabledConfig()
			cfg.Selection.Temperature = tc.temp
			loads := []WorkerLoad{{}, {}, {}, {ActiveDecodeBlocks: 1}}
			s := selectorFor(&cfg, 160, loads, nil, modeRemoteDecode)
			if tc.temp > 0 {
				loads = loads[:3]
				s = selectorFor(&cfg, 160, loads, nil, modeRemoteDecode)
			}
			rng := newRand(42)
			const n = 30000
			counts := make([]int, 3)
			for range n {
				i := s.pick(rng)
				if i > 2 {
					t.Fatalf("picked the more expensive worker %d", i)
				}
				counts[i]++
			}
			if x := chiSquare(counts, n); x > 9.21 {
				t.Fatalf("counts %v: chi-square %.2f > 9.21", counts, x)
			}
		})
	}
}

// TestSelectSoftmax is S3: T=1, costs {0, 10} ⇒ P = 0.731 / 0.269.
func TestSelectSoftmax(t *testing.T) {
	cfg := enabledConfig()
	cfg.Selection.Temperature = 1
	loads := []WorkerLoad{{}, {ActiveDecodeBlocks: 10}}
	s := selectorFor(&cfg, 0, loads, nil, modeRemoteDecode)
	if c0, c1 := s.cost(0), s.cost(1); c1-c0 != 10 {
		t.Fatalf("setup: costs %v %v", c0, c1)
	}
	rng := newRand(7)
	const n = 30000
	first := 0
	for range n {
		if s.pick(rng) == 0 {
			first++
		}
	}
	want := 1 / (1 + math.Exp(-1))
	if p := float64(first) / n; math.Abs(p-want) > 0.01 {
		t.Fatalf("P(cost 0) = %.4f, want %.3f ± 0.01", p, want)
	}
	// Temperature → large flattens the distribution; → small approaches the argmin.
	cfg.Selection.Temperature = 0.05
	s = selectorFor(&cfg, 0, loads, nil, modeRemoteDecode)
	for range 1000 {
		if s.pick(rng) != 0 {
			t.Fatal("T=0.05 picked the expensive worker (p = e^-20)")
		}
	}
}

func TestSelectRestrictAndEmpty(t *testing.T) {
	cfg := enabledConfig()
	s := selectorFor(&cfg, 160, []WorkerLoad{{}, {ActiveDecodeBlocks: 100}}, nil, modeRemoteDecode)
	s.only = 1
	if got := s.pick(newRand(1)); got != 1 {
		t.Fatalf("restricted pick = %d, want 1", got)
	}
	s = selectorFor(&cfg, 160, nil, nil, modeRemoteDecode)
	if got := s.pick(newRand(1)); got != -1 {
		t.Fatalf("empty pool pick = %d, want -1", got)
	}
	cfg.Selection.Temperature = 1
	s = selectorFor(&cfg, 160, nil, nil, modeRemoteDecode)
	if got := s.pick(newRand(1)); got != -1 {
		t.Fatalf("empty pool softmax pick = %d, want -1", got)
	}
}

// TestPickBothMatchesSeparatePicks checks the fused one-pass decode selection against the two
// separate selections it replaces, on random loads and overlaps (deterministic first minimum),
// and that its tie-breaks stay uniform.
func TestPickBothMatchesSeparatePicks(t *testing.T) {
	cfg := enabledConfig()
	cfg.Selection.ActiveRequestWeight = 0.5
	rng := newRand(11)
	for iter := range 2000 {
		n := 1 + rng.IntN(12)
		loads := make([]WorkerLoad, n)
		sigs := make([]Signal, n)
		for i := range loads {
			loads[i] = WorkerLoad{ActivePrefillTokens: int64(rng.IntN(4) * 160), ActiveDecodeBlocks: int64(rng.IntN(4) * 10),
				NewBlocks: int64(rng.IntN(3)), ActiveRequests: int64(rng.IntN(3))}
			sigs[i] = Signal{GPU: rng.IntN(4) * 5, Host: rng.IntN(2), Stream: Stream{Connected: rng.IntN(8) != 0, LastStored: testNow}}
		}
		isl := 16 * (1 + rng.IntN(40))
		only := -1
		if iter%5 == 0 {
			only = rng.IntN(n)
		}
		b := selectorFor(&cfg, isl, loads, sigs, modeBypass)
		r := selectorFor(&cfg, isl, loads, sigs, modeRemoteDecode)
		b.only, r.only = only, only
		gb, gr := b.pickBoth(nil)
		if wb, wr := b.pick(nil), r.pick(nil); gb != wb || gr != wr {
			t.Fatalf("iteration %d: pickBoth = %d,%d, separate picks = %d,%d", iter, gb, gr, wb, wr)
		}
	}
	loads := []WorkerLoad{{}, {}, {}}
	s := selectorFor(&cfg, 160, loads, nil, modeBypass)
	counts := make([]int, 3)
	for range 30000 {
		_, r := s.pickBoth(rng)
		counts[r]++
	}
	if x := chiSquare(counts, 30000); x > 9.21 {
		t.Fatalf("fused remote tie-break counts %v: chi-square %.2f", counts, x)
	}
}

// TestSelectSoftmaxLargePool covers sampling beyond the stack buffer (costs recomputed): the
// same distribution as S3 on pools up to one past the buffer with one cheap worker.
func TestSelectSoftmaxLargePool(t *testing.T) {
	cfg := enabledConfig()
	cfg.Selection.Temperature = 1
	for _, n := range []int{2, sampleBuf, sampleBuf + 1} {
		loads := make([]WorkerLoad, n)
		for i := 1; i < n; i++ {
			loads[i].ActiveDecodeBlocks = 10
		}
		s := selectorFor(&cfg, 0, loads, nil, modeRemoteDecode)
		rng := newRand(5)
		first := 0
		const draws = 3000
		for range draws {
			if s.pick(rng) == 0 {
				first++
			}
		}
		// P(first) = 1 / (1 + (n-1)·e^-1).
		want := 1 / (1 + float64(n-1)*math.Exp(-1))
		if p := float64(first) / draws; math.Abs(p-want) > 4*math.Sqrt(want*(1-want)/draws)+1e-3 {
			t.Fatalf("n=%d: P(cheap) = %.4f, want %.4f", n, p, want)
		}
	}
}
