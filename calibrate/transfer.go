package calibrate

import (
	"fmt"
	"math"
	"slices"

	"github.com/condisagg/condisagg/cost"
)

// TransferSample is one KV transfer of a fresh prompt of ISL tokens from a prefill engine to a
// decode engine (perf-model.md §4), as the decode engine reports it: Bytes moved and MS the
// transfer's duration (vLLM's NixlConnector: the change of vllm:nixl_bytes_transferred_sum,
// and of vllm:nixl_xfer_time_seconds_sum over its _count, across the one request).
type TransferSample struct {
	ISL   int
	Bytes float64
	MS    float64
}

// TransferResult is the fitted transfer term t_xfer = α + bytes/BW of cost.Model, and the KV
// bytes per prompt token the engine moved.
type TransferResult struct {
	AlphaMS       float64 // cost.Model.XferAlphaMS
	GBps          float64 // cost.Model.XferGBps (10^9 B/s)
	BytesPerToken float64 // cost.Model.BytesPerToken: Σbytes / ΣISL
	Quality       cost.Quality
	RelStdErr     map[string]float64 // xfer_alpha_ms, xfer_gbps
	Dropped       []string           // xfer_alpha_ms when fitted negative but not distinguishable from 0; xfer_gbps when the time does not resolve a per-byte term
	Fitted        []float64          // per sample, the model's time (ms)
}

// PlanTransfer is the transfer sweep: Repeats rounds over PrefillPoints prompt lengths,
// geometric from 4 blocks' worth (64 tokens) to the longest prefill probe (within half the KV
// cache), so that the fixed latency and the per-byte time both show.
func PlanTransfer(c PlanConfig) ([]Probe, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	c = c.withDefaults()
	var probes []Probe
	isls := geometric(max(c.MinISL, 64), min(c.MaxISL, c.KVTokens/2), c.PrefillPoints)
	for range c.Repeats {
		for _, n := range isls {
			probes = append(probes, Probe{Kind: Transfer, ISL: n, Batch: 1, OutTokens: 1})
		}
	}
	return probes, nil
}

// FitTransfer fits t = α + β·bytes to the samples by least squares on relative error (they span
// a fraction of a millisecond to seconds); BW = 1/β. Refusals: ErrTooFewSamples (fewer than 3
// distinct prompt lengths, or no bytes reported), ErrPoorFit (the time does not grow with the
// bytes, α more than 2 standard errors below 0, or R² under minR2). α fitted negative within 2
// standard errors is fixed at 0 (β refitted alone) and listed in Dropped. A per-byte term
// within 2 standard errors of 0 (a transfer bound by its fixed latency: a CPU engine's NIXL over
// UCX on loopback, whose time barely moves from 64 to 2,000 tokens) is dropped too: GBps 0 (no
// bandwidth term in cost.Model.TransferTime), α the weighted mean time. R² means nothing for
// a constant (it is 0 by definition), so that fit is refused only when α itself is not
// resolved (relative standard error over MaxLatencyRelStdErr, 50 %: a latency this uncertain still bounds a term that is small beside the steps).
func FitTransfer(samples []TransferSample, minR2 float64) (*TransferResult, error) {
	if minR2 == 0 {
		minR2 = FitOptions{}.withDefaults().MinR2
	}
	var isls []int
	var bytes, tokens float64
	for _, s := range samples {
		if !(s.MS > 0) || !(s.Bytes > 0) || s.ISL <= 0 || math.IsInf(s.MS, 0) || math.IsInf(s.Bytes, 0) {
			return nil, fmt.Errorf("%w: transfer sample (ISL %d): %v bytes in %v ms: want both > 0 (did the decode engine move any KV?)",
				ErrTooFewSamples, s.ISL, s.Bytes, s.MS)
		}
		if !slices.Contains(isls, s.ISL) {
			isls = append(isls, s.ISL)
		}
		bytes += s.Bytes
		tokens += float64(s.ISL)
	}
	if len(isls) < 3 {
		return nil, fmt.Errorf("%w: %d transfer prompt lengths; want >= 3 (latency and bandwidth)", ErrTooFewSamples, len(isls))
	}
	r := &TransferResult{BytesPerToken: bytes / tokens, RelStdErr: map[string]float64{}}
	alpha, beta, seAlpha, seBeta := lineFit(samples, true)
	if alpha < 0 {
		if alpha < -2*seAlpha {
			return nil, fmt.Errorf("%w: transfer latency fitted at %.3g ms, more than 2 standard errors (%.2g) below 0", ErrPoorFit, alpha, seAlpha)
		}
		r.Dropped = append(r.Dropped, "xfer_alpha_ms")
		alpha, beta, seAlpha, seBeta = lineFit(samples, false)
	}
	if !(beta > 2*seBeta) && len(r.Dropped) == 0 && !(beta < -2*seBeta) {
		return latencyOnly(samples, r)
	}
	if !(beta > 0) {
		return nil, fmt.Errorf("%w: the transfer time does not grow with the bytes moved (%.3g ms per GB)", ErrPoorFit, beta*1e9)
	}
	r.AlphaMS, r.GBps = alpha, 1e-6/beta // β ms/byte: 1/β bytes/ms = 1e3/β B/s = 1e-6/β GB/s
	if alpha > 0 {
		r.RelStdErr["xfer_alpha_ms"] = seAlpha / alpha
	}
	r.RelStdErr["xfer_gbps"] = seBeta / beta
	y := make([]float64, len(samples))
	worst := 0.0
	for i, s := range samples {
		y[i] = s.MS
		f := alpha + beta*s.Bytes
		r.Fitted = append(r.Fitted, f)
		worst = max(worst, math.Abs(s.MS-f)/s.MS)
	}
	r.Quality = cost.Quality{Samples: len(samples), R2: rSquared(y, r.Fitted), WorstRelErr: worst}
	if !(r.Quality.R2 >= minR2) {
		return nil, fmt.Errorf("%w: R² of the transfer samples is %.3f (< %.2f), worst relative error %.0f%%: the transfer time is not α + bytes/BW, or the measurements were disturbed",
			ErrPoorFit, r.Quality.R2, minR2, 100*worst)
	}
	return r, nil
}

// MaxLatencyRelStdErr bounds the relative standard error of α in a latency-only transfer fit.
const MaxLatencyRelStdErr = 0.5

// latencyOnly is the fit t = α of a transfer whose per-byte term is not resolved: α the mean
// time (what a simulated transfer must take on average; the 1/t²-weighted mean of the line fit
// is biased low by noise), GBps 0, xfer_gbps in Dropped.
func latencyOnly(samples []TransferSample, r *TransferResult) (*TransferResult, error) {
	n := float64(len(samples))
	var sum float64
	for _, s := range samples {
		sum += s.MS
	}
	alpha := sum / n
	var ss float64
	for _, s := range samples {
		ss += (s.MS - alpha) * (s.MS - alpha)
	}
	rse := math.Sqrt(ss/(n-1)/n) / alpha // standard error of the mean, relative
	if !(rse <= MaxLatencyRelStdErr) {
		return nil, fmt.Errorf("%w: the transfer time neither grows with the bytes moved nor stays put: latency %.3g ms ±%.0f%% (> %.0f%%)",
			ErrPoorFit, alpha, 100*rse, 100*MaxLatencyRelStdErr)
	}
	r.AlphaMS, r.GBps = alpha, 0
	r.Dropped = append(r.Dropped, "xfer_gbps")
	r.RelStdErr["xfer_alpha_ms"] = rse
	y := make([]float64, len(samples))
	worst := 0.0
	for i, s := range samples {
		y[i] = s.MS
		r.Fitted = append(r.Fitted, alpha)
		worst = max(worst, math.Abs(s.MS-alpha)/s.MS)
	}
	r.Quality = cost.Quality{Samples: len(samples), R2: rSquared(y, r.Fitted), WorstRelErr: worst}
	return r, nil
}

// lineFit is the weighted least-squares line t = α + β·bytes (through 0 when !intercept), each
// sample weighted by 1/t² so that the fit minimises relative error, with the coefficients'
// standard errors.
func lineFit(samples []TransferSample, intercept bool) (alpha, beta, seAlpha, seBeta float64) {
	var sw, sx, sy, sxx, sxy float64
	for _, s := range samples {
		w := 1 / (s.MS * s.MS)
		sw += w
		sx += w * s.Bytes
		sy += w * s.MS
		sxx += w * s.Bytes * s.Bytes
		sxy += w * s.Bytes * s.MS
	}
	n := float64(len(samples))
	dof := n - 1
	if intercept {
		det := sw*sxx - sx*sx
		alpha, beta = (sxx*sy-sx*sxy)/det, (sw*sxy-sx*sy)/det
		dof = n - 2
		s2 := residualVariance(samples, alpha, beta, dof)
		return alpha, beta, math.Sqrt(s2 * sxx / det), math.Sqrt(s2 * sw / det)
	}
	beta = sxy / sxx
	s2 := residualVariance(samples, 0, beta, dof)
	return 0, beta, 0, math.Sqrt(s2 / sxx)
}

// residualVariance is the weighted residual variance of the line over dof degrees of freedom.
func residualVariance(samples []TransferSample, alpha, beta, dof float64) float64 {
	if dof <= 0 {
		return 0
	}
	var ss float64
	for _, s := range samples {
		e := (s.MS - alpha - beta*s.Bytes) / s.MS
		ss += e * e
	}
	return ss / dof
}
