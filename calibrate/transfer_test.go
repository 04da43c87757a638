package calibrate

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/condisagg/condisagg/cost"
)

// transferSamples are the sweep's transfers of m over the plan's prompt lengths, each time
// multiplied by (1 + noise·N(0,1)).
func transferSamples(t *testing.T, m cost.Model, noise float64, seed uint64) []TransferSample {
	t.Helper()
	probes, err := PlanTransfer(PlanConfig{MaxModelLen: 32768, KVTokens: 400000, MaxNumBatchedTokens: 8192, Repeats: 3})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 7))
	var out []TransferSample
	for _, p := range probes {
		ms := float64(m.TransferTime(p.ISL)) / 1e6 * (1 + noise*rng.NormFloat64())
		out = append(out, TransferSample{ISL: p.ISL, Bytes: float64(p.ISL) * m.BytesPerToken, MS: ms})
	}
	return out
}

// TestFitTransfer: perf-model.md §4 t_xfer = α + bytes/BW comes back from the transfer sweep,
// exactly without noise and within 5 % per term with 1 % noise; the bytes per token are the
// bytes moved over the prompt tokens.
func TestFitTransfer(t *testing.T) {
	m, err := cost.ByName("llama3.1-8b-h100")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		spec  string
		noise float64
		tol   float64
	}{{"noise_free_is_exact", 0, 1e-6}, {"one_percent_noise_within_5_percent", 0.01, 0.05}} {
		t.Run(tc.spec, func(t *testing.T) {
			for seed := range uint64(5) {
				r, err := FitTransfer(transferSamples(t, m, tc.noise, seed), 0)
				if err != nil {
					t.Fatal(err)
				}
				for _, c := range []struct {
					name      string
					got, want float64
				}{{"xfer_alpha_ms", r.AlphaMS, m.XferAlphaMS}, {"xfer_gbps", r.GBps, m.XferGBps}, {"bytes_per_token", r.BytesPerToken, m.BytesPerToken}} {
					if math.Abs(c.got/c.want-1) > tc.tol {
						t.Errorf("seed %d: %s %v, want %v within %v", seed, c.name, c.got, c.want, tc.tol)
					}
				}
				if r.Quality.R2 < 0.99 || r.Quality.Samples != len(r.Fitted) || r.RelStdErr["xfer_gbps"] > 0.05 {
					t.Errorf("seed %d: quality %+v, rel std err %v", seed, r.Quality, r.RelStdErr)
				}
			}
		})
	}
}

// TestFitTransferRefusals: each refusal of FitTransfer, and α fixed at 0 when the engine shows
// no fixed latency.
func TestFitTransferRefusals(t *testing.T) {
	m := cost.Model{BytesPerToken: 1000, XferAlphaMS: 0, XferGBps: 1}
	noLatency := transferSamples(t, m, 0.002, 1)
	r, err := FitTransfer(noLatency, 0)
	if err != nil {
		t.Fatalf("no fixed latency: %v", err)
	}
	if r.AlphaMS < 0 || math.Abs(r.GBps-1) > 0.01 || (r.AlphaMS == 0) != slices.Contains(r.Dropped, "xfer_alpha_ms") {
		t.Fatalf("no fixed latency: α %v (dropped %v), %v GB/s", r.AlphaMS, r.Dropped, r.GBps)
	}
	two := []TransferSample{{ISL: 100, Bytes: 1e5, MS: 1}, {ISL: 1000, Bytes: 1e6, MS: 2}, {ISL: 100, Bytes: 1e5, MS: 1.1}}
	if _, err := FitTransfer(two, 0); !errors.Is(err, ErrTooFewSamples) {
		t.Fatalf("two lengths: %v", err)
	}
	if _, err := FitTransfer(append(two, TransferSample{ISL: 500, Bytes: 0, MS: 1}), 0); !errors.Is(err, ErrTooFewSamples) {
		t.Fatalf("no bytes reported: %v", err)
	}
	shrinking := []TransferSample{{ISL: 100, Bytes: 1e5, MS: 9}, {ISL: 1000, Bytes: 1e6, MS: 5}, {ISL: 5000, Bytes: 5e6, MS: 1}}
	if _, err := FitTransfer(shrinking, 0); !errors.Is(err, ErrPoorFit) {
		t.Fatalf("time falling with the bytes: %v", err)
	}
	scattered := []TransferSample{{ISL: 100, Bytes: 1e5, MS: 1}, {ISL: 1000, Bytes: 1e6, MS: 30}, {ISL: 2000, Bytes: 2e6, MS: 2}, {ISL: 5000, Bytes: 5e6, MS: 60}, {ISL: 9000, Bytes: 9e6, MS: 5}}
	if _, err := FitTransfer(scattered, 0); !errors.Is(err, ErrPoorFit) {
		t.Fatalf("scattered: %v", err)
	}
}

// TestFitTransferLatencyOnly: a transfer whose time does not move with its size (a CPU engine's
// NIXL over UCX on loopback: ~0.4 s whether 64 or 2,000 tokens) is fitted as its latency alone,
// the bandwidth term dropped (0: none); a time that neither grows nor stays put is refused.
func TestFitTransferLatencyOnly(t *testing.T) {
	m := cost.Model{BytesPerToken: 1024, XferAlphaMS: 400, XferGBps: 1000}
	for seed := range uint64(5) {
		r, err := FitTransfer(transferSamples(t, m, 0.1, seed), 0)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if math.Abs(r.AlphaMS/400-1) > 0.05 || r.GBps != 0 || !slices.Contains(r.Dropped, "xfer_gbps") || r.RelStdErr["xfer_alpha_ms"] > 0.05 {
			t.Fatalf("seed %d: α %v ±%v, %v GB/s, dropped %v", seed, r.AlphaMS, r.RelStdErr["xfer_alpha_ms"], r.GBps, r.Dropped)
		}
		fm := cost.Model{BytesPerToken: r.BytesPerToken, XferAlphaMS: r.AlphaMS, XferGBps: r.GBps}
		if err := fm.Validate(); err != nil || fm.TransferTime(64) != fm.TransferTime(4096) {
			t.Fatalf("seed %d: the fitted model %+v: %v", seed, fm, err)
		}
	}
	wild := []TransferSample{{ISL: 100, Bytes: 1e5, MS: 1000}, {ISL: 1000, Bytes: 1e6, MS: 1}, {ISL: 2000, Bytes: 2e6, MS: 1},
		{ISL: 100, Bytes: 1e5, MS: 1}, {ISL: 1000, Bytes: 1e6, MS: 1}, {ISL: 2000, Bytes: 2e6, MS: 1}}
	if _, err := FitTransfer(wild, 0); !errors.Is(err, ErrPoorFit) {
		t.Fatalf("wild: %v", err)
	}
}
