package calibrate

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/condisagg/condisagg/cost"
)

var truth = cost.Model{T0: 5, A1: 0.02, A2: 1.5e-6, D1: 0.1, D2: 5e-5}

const (
	truthOverheadMS = 0.4
	truthPerTokenMS = 0.0006 // request handling per prompt token, as vllm-sim's JSON and HTTP
	blockSize       = 16
	budgetTokens    = 8192
)

func planFor(t *testing.T) []Probe {
	t.Helper()
	// Four rounds: with step noise, the attention term rests on a few long mixed steps.
	probes, err := Plan(PlanConfig{MaxModelLen: 16384, KVTokens: 131072, MaxNumBatchedTokens: 8192, Repeats: 4})
	if err != nil {
		t.Fatal(err)
	}
	return probes
}

// synth runs probes against the step-time model m with multiplicative noise: prefill TTFT
// straight from the model, decode probes as lockstep streams whose token times DecodeSample
// reads back. Client jitter of up to jitter is added to every token time.
func synth(t *testing.T, m cost.Model, probes []Probe, noise float64, jitter time.Duration, rng *rand.Rand) []Sample {
	t.Helper()
	dur := func(msv float64) time.Duration {
		return time.Duration(msv * (1 + noise*rng.NormFloat64()) * float64(time.Millisecond))
	}
	var out []Sample
	for _, p := range probes {
		if p.Kind == Prefill {
			// Sent fresh, then again as a prefix-cache hit of every full block but the last token's.
			for _, cached := range []int{0, (p.ISL - 1) / blockSize * blockSize} {
				n := p.ISL - cached
				chunks := (n + budgetTokens - 1) / budgetTokens
				msv := float64(chunks)*m.T0 + m.A1*float64(n) + m.A2*float64(n)*(float64(cached)+float64(n)/2) +
					truthOverheadMS + truthPerTokenMS*float64(p.ISL)
				out = append(out, PrefillSample(p.ISL, cached, budgetTokens, dur(msv)))
			}
			continue
		}
		if p.Kind == Mixed {
			out = append(out, synthMixed(t, m, p, dur, jitter, rng))
			continue
		}
		// Streams arrive in two waves: half prefill in step 0, the rest in step 1.
		var now time.Duration
		times := make([][]time.Duration, p.Batch)
		prompts := make([]int, p.Batch)
		for i := range prompts {
			prompts[i] = p.ISL + i // distinct lengths: the context sum must follow each one
		}
		for step := 0; ; step++ {
			var sh cost.StepShape
			var emit []int
			for i := range p.Batch {
				joined := step >= i%2
				k := len(times[i])
				switch {
				case !joined || k >= p.OutTokens:
				case k == 0:
					sh.PrefillTokens += prompts[i]
					sh.PrefillPairs += float64(prompts[i]) * float64(prompts[i]) / 2
					emit = append(emit, i)
				default:
					sh.DecodeSeqs++
					sh.DecodeContexts += prompts[i] + k
					emit = append(emit, i)
				}
			}
			if sh.Empty() {
				break
			}
			now += dur(m.StepMS(sh))
			for _, i := range emit {
				j := time.Duration(rng.Float64() * float64(jitter))
				times[i] = append(times[i], now+j)
			}
		}
		s, err := DecodeSample(prompts, times)
		if err != nil {
			t.Fatalf("probe %+v: %v", p, err)
		}
		out = append(out, s)
	}
	return out
}

// synthMixed runs the background streams of a mixed probe in lockstep and puts the probe's
// prompt into the step after their MixedLead-th token.
func synthMixed(t *testing.T, m cost.Model, p Probe, dur func(float64) time.Duration, jitter time.Duration, rng *rand.Rand) Sample {
	t.Helper()
	const bgISL = 64
	times := make([][]time.Duration, p.Batch)
	prompts := make([]int, p.Batch)
	var now, first time.Duration
	for k := range p.OutTokens {
		sh := cost.StepShape{}
		for i := range p.Batch {
			prompts[i] = bgISL
			if k == 0 {
				sh.PrefillTokens += bgISL
				sh.PrefillPairs += bgISL * bgISL / 2
			} else {
				sh.DecodeSeqs++
				sh.DecodeContexts += bgISL + k
			}
		}
		if k == MixedLead+1 {
			sh.PrefillTokens += p.ISL
			sh.PrefillPairs += float64(p.ISL) * float64(p.ISL) / 2
		}
		now += dur(m.StepMS(sh))
		if k == MixedLead+1 {
			first = now + time.Duration(rng.Float64()*float64(jitter))
		}
		for i := range p.Batch {
			times[i] = append(times[i], now+time.Duration(rng.Float64()*float64(jitter)))
		}
	}
	s, err := MixedSample(p.ISL, prompts, times, first)
	if err != nil {
		t.Fatalf("probe %+v: %v", p, err)
	}
	return s
}

func within(t *testing.T, got, want cost.Model, tol float64) {
	t.Helper()
	for _, c := range []struct {
		name      string
		got, want float64
	}{{"t0", got.T0, want.T0}, {"a1", got.A1, want.A1}, {"a2", got.A2, want.A2}, {"d1", got.D1, want.D1}, {"d2", got.D2, want.D2}} {
		if e := math.Abs(c.got-c.want) / c.want; !(e <= tol) {
			t.Errorf("%s = %.4g, want %.4g (error %.1f%% > %.0f%%)", c.name, c.got, c.want, 100*e, 100*tol)
		}
	}
}

// TestFitExact: noise-free samples give back the model to 1e-6 and R² 1.
func TestFitExact(t *testing.T) {
	samples := synth(t, truth, planFor(t), 0, 0, rand.New(rand.NewPCG(1, 2)))
	r, err := Fit(samples, FitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	within(t, r.Model, truth, 1e-5)
	if math.Abs(r.OverheadMS-truthOverheadMS) > 1e-6 || math.Abs(r.OverheadPerTokenMS-truthPerTokenMS) > 1e-9 || math.Abs(r.R2-1) > 1e-9 {
		t.Errorf("overhead %v + %v/token, R² %v", r.OverheadMS, r.OverheadPerTokenMS, r.R2)
	}
}

// TestFitNoisy: 0.5 % noise on every step, 0.5 ms client jitter and three disturbed prefills (a
// pause of 10× the TTFT) still give every coefficient within 5 % (40 of 40 seeds tried); the
// robust weights keep the outliers from pulling the fit. At 1 % step noise a2 misses 5 % in a
// quarter of the seeds with 4 rounds: noisy engines need more --repeats.
func TestFitNoisy(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	probes := planFor(t)
	samples := synth(t, truth, probes, 0.005, 500*time.Microsecond, rng)
	for i := 0; i < 3; i++ {
		samples[2*i].MS *= 10
	}
	r, err := Fit(samples, FitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	within(t, r.Model, truth, 0.05)
	if len(r.Outliers) != 3 || r.Outliers[0] != 0 || r.Outliers[2] != 4 {
		t.Errorf("outliers %v, want the three disturbed prefills 0, 2, 4", r.Outliers)
	}
	if e := math.Abs(r.OverheadPerTokenMS-truthPerTokenMS) / truthPerTokenMS; e > 0.2 {
		t.Errorf("overhead per token %v, want %v", r.OverheadPerTokenMS, truthPerTokenMS)
	}
	if q := r.Families[Prefill]; q.WorstRelErr > 0.1 || q.R2 < 0.99 {
		t.Errorf("prefill quality without the outliers %+v", q)
	}
	if len(r.RelStdErr) != len(Terms) {
		t.Errorf("relative standard errors %v", r.RelStdErr)
	}
}

// TestFitRefusals: each way a fit can fail is refused with its own error.
func TestFitRefusals(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	samples := synth(t, truth, planFor(t), 0.05, time.Millisecond, rng)
	t.Run("not_converged", func(t *testing.T) {
		noisy := append([]Sample(nil), samples...)
		noisy[0].MS *= 20
		_, err := Fit(noisy, FitOptions{MaxIterations: 2})
		if !errors.Is(err, ErrNotConverged) || !strings.Contains(err.Error(), "2 reweighting rounds") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("too_few", func(t *testing.T) {
		var prefills []Sample
		for _, s := range samples {
			if s.Kind == Prefill {
				prefills = append(prefills, s)
			}
		}
		if _, err := Fit(prefills, FitOptions{}); !errors.Is(err, ErrTooFewSamples) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("ill_conditioned", func(t *testing.T) {
		// Decode samples whose context sum is a fixed multiple of the batch size cannot
		// separate d1 from d2.
		var same []Sample
		for _, s := range samples {
			if s.Kind == Mixed {
				continue // two streams beside a prompt would tell d1 from d2
			}
			if s.Kind == Decode {
				s.Contexts = 1000 * float64(s.Batch)
				s.MS = truth.StepMS(cost.StepShape{DecodeSeqs: s.Batch, DecodeContexts: int(s.Contexts)})
				s.Contexts += float64(len(same)) * 1e-9 // distinct, but not enough
			}
			same = append(same, s)
		}
		if _, err := Fit(same, FitOptions{}); !errors.Is(err, ErrIllConditioned) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("poor_fit", func(t *testing.T) {
		// Step times that fall with the batch size are no cost model at all.
		bad := append([]Sample(nil), samples...)
		for i, s := range bad {
			if s.Kind == Decode {
				bad[i].MS = 50 / float64(s.Batch) * (1 + 0.3*rng.Float64())
			}
		}
		if _, err := Fit(bad, FitOptions{}); !errors.Is(err, ErrPoorFit) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("bad_time", func(t *testing.T) {
		bad := append([]Sample(nil), samples...)
		bad[1].MS = math.NaN()
		if _, err := Fit(bad, FitOptions{}); err == nil || !strings.Contains(err.Error(), "not a positive number") {
			t.Fatalf("err = %v", err)
		}
	})
}

// TestFitDropsInvisibleTerm: an engine with no attention cost (a2 = 0) fits a2 at or near 0;
// a slightly negative a2 is fixed at 0 and named, not refused.
func TestFitDropsInvisibleTerm(t *testing.T) {
	m := truth
	m.A2 = 0
	samples := synth(t, m, planFor(t), 0.01, 0, rand.New(rand.NewPCG(7, 8)))
	r, err := Fit(samples, FitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Model.A2 < 0 || r.Model.A2 > 5e-8 {
		t.Errorf("a2 = %v, want ~0", r.Model.A2)
	}
	if r.Model.A2 == 0 && (len(r.Dropped) != 1 || r.Dropped[0] != "a2") {
		t.Errorf("dropped %v", r.Dropped)
	}
}

// TestDecodeSampleWindow: a probe whose output is shorter than the spread of its first tokens
// has no steady window and says so.
func TestDecodeSampleWindow(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		var out []time.Duration
		for _, x := range v {
			out = append(out, time.Duration(x)*time.Millisecond)
		}
		return out
	}
	_, err := DecodeSample([]int{10, 10}, [][]time.Duration{ms(10, 20, 30, 40), ms(35, 45, 55, 65)})
	if !errors.Is(err, ErrNoSteadyWindow) {
		t.Fatalf("err = %v", err)
	}
	// A mixed prompt whose first token is nearest the streams' first token did not run beside them.
	if _, err := MixedSample(100, []int{10}, [][]time.Duration{ms(10, 20, 30)}, 9*time.Millisecond); !errors.Is(err, ErrNoSteadyWindow) {
		t.Fatalf("mixed: err = %v", err)
	}
	var a, b []int
	for k := range 40 {
		a, b = append(a, 10+10*k), append(b, 20+10*k)
	}
	s, err := DecodeSample([]int{100, 200}, [][]time.Duration{ms(a...), ms(b...)})
	if err != nil {
		t.Fatal(err)
	}
	if s.MS != 10 || s.Batch != 2 || s.Steps < minWindowSteps {
		t.Fatalf("sample %+v", s)
	}
}

// TestPlan: the sweep stays inside the engine's bounds and spans enough to fit.
func TestPlan(t *testing.T) {
	c := PlanConfig{MaxModelLen: 4096, KVTokens: 20000, MaxNumBatchedTokens: 2048}
	probes, err := Plan(c)
	if err != nil {
		t.Fatal(err)
	}
	n := map[Kind]int{}
	for _, p := range probes {
		n[p.Kind]++
		if p.Kind == Mixed && p.ISL+MixedStreams > c.MaxNumBatchedTokens {
			t.Errorf("mixed probe %+v does not fit one step", p)
		}
		if p.ISL+p.OutTokens > c.MaxModelLen || p.Batch*(p.ISL+p.OutTokens) > c.KVTokens/2 {
			t.Errorf("probe %+v exceeds the engine", p)
		}
	}
	// 8 lengths × 2 rounds; mixed the 6 lengths under the step budget 2048 − 2, and 2046.
	if n[Prefill] != 16 || n[Mixed] != 14 || n[Decode] < 3 {
		t.Errorf("probes per kind %v", n)
	}
	if _, err := Plan(PlanConfig{MaxModelLen: 32, KVTokens: 100, MaxNumBatchedTokens: 8}); err == nil ||
		!strings.Contains(err.Error(), "max_model_len: 32") || !strings.Contains(err.Error(), "max_num_batched_tokens: 8") {
		t.Errorf("bad bounds: %v", err)
	}
}
