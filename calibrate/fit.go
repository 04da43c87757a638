package calibrate

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"gonum.org/v1/gonum/mat"
	"gonum.org/v1/gonum/stat"

	"github.com/condisagg/condisagg/cost"
)

// Terms names the coefficients, in the order of the design matrix's columns. overhead (ms per
// request) and overhead_per_token (ms per prompt token) are the request's handling before its
// first step (HTTP, JSON, tokenization): part of a TTFT, not of a step, so not cost-model terms.
var Terms = []string{"t0", "a1", "a2", "d1", "d2", "overhead", "overhead_per_token"}

const (
	nTerms     = 7
	firstExtra = 5 // index of the first term that is not a cost-model coefficient
)

// FitOptions tunes the fit; zero fields take the defaults.
type FitOptions struct {
	MaxIterations int     // robust reweighting rounds before the fit counts as not converged (default 50)
	Tolerance     float64 // converged when no coefficient moves by more than this, relative (default 1e-6)
	MinR2         float64 // a fit explaining less of the variance is refused (default 0.95)
}

func (o FitOptions) withDefaults() FitOptions {
	if o.MaxIterations == 0 {
		o.MaxIterations = 50
	}
	if o.Tolerance == 0 {
		o.Tolerance = 1e-6
	}
	if o.MinR2 == 0 {
		o.MinR2 = 0.95
	}
	return o
}

// Result is a converged fit.
type Result struct {
	Model      cost.Model // T0, A1, A2, D1, D2 set; the rest is the caller's
	OverheadMS float64    // per request
	// OverheadPerTokenMS is per prompt token; 0 when no cache-hit prefill was measured.
	OverheadPerTokenMS float64
	R2                 float64
	Families           map[Kind]cost.Quality // per kind of probe: R² and the worst relative error
	RelStdErr          map[string]float64    // each coefficient's standard error over its value
	Dropped            []string              // terms fixed at 0: fitted negative but not distinguishable from 0
	Outliers           []int                 // samples the robust fit set aside (residual over outlierCut robust deviations); not in R²
	Iterations         int
	Fitted             []float64 // per sample, the model's time (ms)
}

// Sentinel errors of Fit, matched with errors.Is.
var (
	ErrTooFewSamples  = errors.New("calibrate: too few distinct samples")
	ErrIllConditioned = errors.New("calibrate: the samples do not separate the terms")
	ErrNotConverged   = errors.New("calibrate: fit did not converge")
	ErrPoorFit        = errors.New("calibrate: the cost model does not fit the measurements")
)

// row is the design row of s: the multipliers of t0, a1, a2, d1, d2 and the request's
// handling (per request, per prompt token).
func row(s Sample) [nTerms]float64 {
	if s.Kind == Prefill {
		n, h := float64(s.ISL-s.Cached), float64(s.Cached)
		return [nTerms]float64{float64(s.Chunks), n, n * (h + n/2), 0, 0, 1, float64(s.ISL)}
	}
	if s.Kind == Mixed {
		n := float64(s.ISL)
		return [nTerms]float64{1, n * s.Share, n * n / 2 * s.Share, float64(s.Batch), s.Contexts, 0, 0}
	}
	return [nTerms]float64{1, 0, 0, float64(s.Batch), s.Contexts, 0, 0}
}

// Fit fits the step-time coefficients to the samples by least squares on relative error (the
// samples span from a few ms to seconds), reweighted with Huber weights until the coefficients
// settle, so a few disturbed measurements (a GC pause, a noisy neighbour) do not pull the fit.
//
// With Mixed samples over at least 3 prompt lengths, the five step terms come from the
// measurements inside the engine alone (Decode and Mixed windows), and the isolated Prefill
// samples then only give the request's handling (overhead, overhead_per_token) on top of the
// fitted steps: a TTFT carries the API server's per-request work, whose noise on a busy host
// would otherwise leak into a1 and a2. Without them all samples are fitted together.
//
// It refuses too few or too alike samples, a fit that does not settle in MaxIterations rounds,
// a coefficient fitted clearly negative, and a fit with R² below MinR2.
func Fit(samples []Sample, opt FitOptions) (*Result, error) {
	opt = opt.withDefaults()
	if err := enough(samples); err != nil {
		return nil, err
	}
	cachedPrefill := slices.ContainsFunc(samples, func(s Sample) bool { return s.Kind == Prefill && s.Cached > 0 })
	mixedLens := map[int]bool{}
	var inEngine, prefills []Sample
	for _, s := range samples {
		if s.Kind == Prefill {
			prefills = append(prefills, s)
			continue
		}
		inEngine = append(inEngine, s)
		if s.Kind == Mixed {
			mixedLens[s.ISL] = true
		}
	}
	if len(mixedLens) < 3 || len(prefills) == 0 {
		active := []int{0, 1, 2, 3, 4, 5}
		// Without cache-hit prefills the per-token handling cannot be told from a1: it stays in a1.
		if cachedPrefill {
			active = append(active, 6)
		}
		coef, iters, dropped, err := fitTerms(samples, active, opt, nil)
		if err != nil {
			return nil, err
		}
		return result(samples, coef, iters, dropped, opt, Prefill, Decode, Mixed)
	}
	steps, iters, dropped, err := fitTerms(inEngine, []int{0, 1, 2, 3, 4}, opt, nil)
	if err != nil {
		return nil, err
	}
	extra := []int{5}
	if cachedPrefill {
		extra = append(extra, 6)
	}
	handling, _, _, err := fitTerms(prefills, extra, opt, func(s Sample) float64 { return predict(steps.value, s) })
	if err != nil {
		return nil, err
	}
	for _, j := range extra {
		steps.value[j], steps.se[j] = handling.value[j], handling.se[j]
	}
	for k, v := range handling.scale {
		steps.scale[k] = v
	}
	// The isolated prefills' R² is reported, not gated: their spread is the API server's.
	return result(samples, steps, iters, dropped, opt, Decode, Mixed)
}

// fitTerms fits the active terms to samples, less offset(s) when offset is not nil. A
// step term fitted negative but within two standard errors of 0 cannot be seen in this sweep
// (a CPU engine's attention term, say): it is fixed at 0 and the rest fitted again.
func fitTerms(samples []Sample, active []int, opt FitOptions, offset func(Sample) float64) (coefs, int, []string, error) {
	var dropped []string
	for {
		coef, iters, err := irls(samples, active, opt, offset)
		if err != nil {
			return coefs{}, iters, nil, err
		}
		worst, worstT := -1, 0.0
		for _, j := range active {
			if j >= firstExtra || coef.value[j] >= 0 {
				continue
			}
			if t := -coef.value[j] / coef.se[j]; t > 2 {
				return coefs{}, iters, nil, fmt.Errorf("%w: %s = %.3g is negative (%.1f standard errors below 0): the measurements contradict the step-time model; check that nothing else ran on the engine",
					ErrPoorFit, Terms[j], coef.value[j], t)
			} else if worst < 0 || t > worstT {
				worst, worstT = j, t
			}
		}
		if worst < 0 {
			return coef, iters, dropped, nil
		}
		active = slices.DeleteFunc(active, func(j int) bool { return j == worst })
		dropped = append(dropped, Terms[worst])
	}
}

// enough checks that the samples can separate the six terms.
func enough(samples []Sample) error {
	isl, batch, ctx := map[int]bool{}, map[int]bool{}, map[float64]bool{}
	for _, s := range samples {
		switch s.Kind {
		case Prefill, Mixed:
			isl[s.ISL] = true
		case Decode:
			batch[s.Batch] = true
			ctx[s.Contexts] = true
		}
		if !(s.MS > 0) || math.IsInf(s.MS, 0) {
			return fmt.Errorf("calibrate: %s sample (ISL %d, batch %d): time %v ms is not a positive number", s.Kind, s.ISL, s.Batch, s.MS)
		}
	}
	if len(isl) < 3 || len(batch) < 2 || len(ctx) < 3 {
		return fmt.Errorf("%w: %d prompt lengths, %d batch sizes, %d decode contexts; want >= 3, 2 and 3", ErrTooFewSamples, len(isl), len(batch), len(ctx))
	}
	return nil
}

type coefs struct {
	value, se [nTerms]float64
	sigma     float64 // residual standard deviation of the weighted relative errors
	// scale is the robust scale (1.4826·MAD) of the relative residuals of each kind of sample at
	// the last round: a decode sample averages many steps and is far less noisy than one TTFT.
	scale map[Kind]float64
}

// outlierCut is how many robust deviations a relative residual may reach before the sample
// counts as disturbed: out of R² and of the worst error, and reported apart.
const outlierCut = 5

// minScale floors the robust scale: relative errors under 0.5 % are below what the fit needs,
// and a run of very steady decode samples must not make a 1 % deviation an outlier.
const minScale = 0.005

// irls runs iteratively reweighted least squares over the active columns.
func irls(samples []Sample, active []int, opt FitOptions, offset func(Sample) float64) (coefs, int, error) {
	n, p := len(samples), len(active)
	w := make([]float64, n)
	for i := range w {
		w[i] = 1
	}
	var prev coefs
	for it := 1; it <= opt.MaxIterations; it++ {
		c, err := solve(samples, active, w, offset)
		if err != nil {
			return coefs{}, it, err
		}
		moved := 0.0
		for _, j := range active {
			if d := math.Abs(c.value[j] - prev.value[j]); it > 1 {
				moved = max(moved, d/max(math.Abs(c.value[j]), 1e-12))
			}
		}
		if it > 1 && moved <= opt.Tolerance {
			c.scale = prev.scale
			return c, it, nil
		}
		// Huber weights on relative residuals, scaled per kind by their median absolute deviation.
		r := make([]float64, n)
		for i, s := range samples {
			r[i] = (s.MS - predict(c.value, s) - off(offset, s)) / s.MS
		}
		c.scale = robustScales(samples, r)
		prev = c
		if n <= p || (c.scale[Prefill] < 1e-9 && c.scale[Decode] < 1e-9) {
			return c, it, nil // an exact fit: nothing to reweight
		}
		for i, s := range samples {
			w[i] = 1
			if u := math.Abs(r[i]) / (1.345 * max(c.scale[s.Kind], minScale)); u > 1 {
				w[i] = 1 / u
			}
		}
	}
	return coefs{}, opt.MaxIterations, fmt.Errorf("%w: coefficients still moving after %d reweighting rounds; the measurements are too noisy: run on an idle engine or raise the repeats",
		ErrNotConverged, opt.MaxIterations)
}

// robustScales is 1.4826·MAD of the relative residuals r per kind of sample.
func robustScales(samples []Sample, r []float64) map[Kind]float64 {
	out := map[Kind]float64{}
	for _, k := range []Kind{Prefill, Decode, Mixed} {
		var abs []float64
		for i, s := range samples {
			if s.Kind == k {
				abs = append(abs, math.Abs(r[i]))
			}
		}
		if len(abs) > 0 {
			slices.Sort(abs)
			out[k] = 1.4826 * abs[len(abs)/2]
		}
	}
	return out
}

// maxCond is the largest condition number of the column-scaled design accepted.
const maxCond = 1e10

// solve is one weighted least-squares solve on relative error with columns scaled to unit size.
func solve(samples []Sample, active []int, w []float64, offset func(Sample) float64) (coefs, error) {
	n, p := len(samples), len(active)
	a := mat.NewDense(n, p, nil)
	b := mat.NewVecDense(n, nil)
	colMax := make([]float64, p)
	for _, s := range samples {
		r := row(s)
		for k, j := range active {
			colMax[k] = max(colMax[k], math.Abs(r[j]))
		}
	}
	for i, s := range samples {
		r := row(s)
		sw := math.Sqrt(w[i]) / s.MS
		for k, j := range active {
			if colMax[k] > 0 {
				a.Set(i, k, r[j]/colMax[k]*sw)
			}
		}
		b.SetVec(i, (s.MS-off(offset, s))*sw)
	}
	var svd mat.SVD
	if !svd.Factorize(a, mat.SVDThin) {
		return coefs{}, fmt.Errorf("%w: SVD failed", ErrIllConditioned)
	}
	if c := svd.Cond(); c > maxCond || math.IsInf(c, 0) {
		return coefs{}, fmt.Errorf("%w: condition number %.3g over %d samples (terms %s); the sweep needs more distinct prompt lengths, batch sizes and contexts",
			ErrIllConditioned, c, n, names(active))
	}
	var x mat.VecDense
	svd.SolveVecTo(&x, b, p)
	var c coefs
	for k, j := range active {
		c.value[j] = x.AtVec(k) / colMax[k]
	}
	// Standard errors: σ²·(AᵀA)⁻¹ = σ²·V·Σ⁻²·Vᵀ on the scaled columns.
	res := 0.0
	for i := range n {
		d := b.AtVec(i) - mat.Dot(a.RowView(i), &x)
		res += d * d
	}
	if n > p {
		c.sigma = math.Sqrt(res / float64(n-p))
	}
	var v mat.Dense
	svd.VTo(&v)
	sv := svd.Values(nil)
	for k, j := range active {
		varK := 0.0
		for m := range p {
			varK += v.At(k, m) * v.At(k, m) / (sv[m] * sv[m])
		}
		c.se[j] = c.sigma * math.Sqrt(varK) / colMax[k]
	}
	return c, nil
}

// off is offset(s), or 0 without an offset.
func off(offset func(Sample) float64, s Sample) float64 {
	if offset == nil {
		return 0
	}
	return offset(s)
}

func predict(v [nTerms]float64, s Sample) float64 {
	r := row(s)
	y := 0.0
	for j := range nTerms {
		y += v[j] * r[j]
	}
	return y
}

func names(active []int) string {
	var s []string
	for _, j := range active {
		s = append(s, Terms[j])
	}
	return strings.Join(s, ", ")
}

// result fills the Result of converged coefficients and checks the R² of the kinds in gated,
// the samples the step terms were fitted to.
func result(samples []Sample, c coefs, iters int, dropped []string, opt FitOptions, gated ...Kind) (*Result, error) {
	v := c.value
	r := &Result{
		Model:      cost.Model{T0: v[0], A1: v[1], A2: v[2], D1: v[3], D2: v[4]},
		OverheadMS: v[5], OverheadPerTokenMS: v[6], Iterations: iters, Dropped: dropped,
		Families: map[Kind]cost.Quality{}, RelStdErr: map[string]float64{},
	}
	for j, name := range Terms {
		if v[j] != 0 {
			r.RelStdErr[name] = c.se[j] / math.Abs(v[j])
		}
	}
	var ys, fs []float64
	for i, s := range samples {
		f := predict(v, s)
		r.Fitted = append(r.Fitted, f)
		if math.Abs(s.MS-f)/s.MS > outlierCut*max(c.scale[s.Kind], minScale) {
			r.Outliers = append(r.Outliers, i)
			continue
		}
		ys, fs = append(ys, s.MS), append(fs, f)
	}
	r.R2 = rSquared(ys, fs)
	for _, k := range []Kind{Prefill, Decode, Mixed} {
		var y, f []float64
		q := cost.Quality{}
		for i, s := range samples {
			if s.Kind == k && !slices.Contains(r.Outliers, i) {
				y, f = append(y, s.MS), append(f, r.Fitted[i])
				q.WorstRelErr = max(q.WorstRelErr, math.Abs(r.Fitted[i]-s.MS)/s.MS)
			}
		}
		if len(y) == 0 {
			continue
		}
		q.Samples, q.R2 = len(y), rSquared(y, f)
		r.Families[k] = q
	}
	var nGated, outGated int
	for i, s := range samples {
		if slices.Contains(gated, s.Kind) {
			nGated++
			if slices.Contains(r.Outliers, i) {
				outGated++
			}
		}
	}
	if outGated > nGated/4 {
		return nil, fmt.Errorf("%w: %d of %d samples are far off the fit (over %d robust deviations); the measurements were disturbed: run on an idle engine",
			ErrPoorFit, outGated, nGated, outlierCut)
	}
	for _, k := range gated {
		if q, ok := r.Families[k]; ok && !(q.R2 >= opt.MinR2) {
			return nil, fmt.Errorf("%w: R² of the %s samples is %.3f (< %.2f), worst relative error %.0f%%; the engine's step time is not t0 + a1·N + a2·N(P+N/2) + d1·B + d2·ΣC, or the measurements were disturbed",
				ErrPoorFit, k, q.R2, opt.MinR2, 100*q.WorstRelErr)
		}
	}
	return r, nil
}

// rSquared is 1 − SS_res/SS_tot of the fitted values f against the measured y.
func rSquared(y, f []float64) float64 {
	if len(y) == 0 {
		return math.NaN()
	}
	mean := stat.Mean(y, nil)
	var res, tot float64
	for i := range y {
		res += (y[i] - f[i]) * (y[i] - f[i])
		tot += (y[i] - mean) * (y[i] - mean)
	}
	if tot == 0 {
		return math.NaN()
	}
	return 1 - res/tot
}
