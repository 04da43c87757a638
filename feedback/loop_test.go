package feedback

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/condisagg/condisagg/policy"
)

func factorOf(f *loop, rt policy.Route, m Metric) float64 {
	c := f.corrections()[rt]
	v := c.TTFT
	if m == MetricTPOT {
		v = c.TPOT
	}
	if v == 0 {
		return 1
	}
	return v
}

// TestFeedbackStepChange: observed/forecast steps from 1 to 3 (the load doubled in a way the
// model does not see) and back. The correction follows within a few hundred samples, moves a
// bounded number of times per step (no oscillation) and holds still between steps, under ±10%
// noise that never moves it by itself.
func TestFeedbackStepChange(t *testing.T) {
	var f loop
	rng := rand.New(rand.NewPCG(1, 2))
	feed := func(n int, ratio float64) (moves int) {
		for range n {
			before := factorOf(&f, policy.RouteDecode, MetricTTFT)
			noisy := ratio * (0.9 + 0.2*rng.Float64())
			f.observe(policy.RouteDecode, MetricTTFT, 100, 100*noisy, 1, 8)
			if factorOf(&f, policy.RouteDecode, MetricTTFT) != before {
				moves++
			}
		}
		return moves
	}
	if m := feed(2000, 1); m != 0 {
		t.Fatalf("noise around the forecast moved the correction %d times", m)
	}
	up := feed(400, 3)
	if got := factorOf(&f, policy.RouteDecode, MetricTTFT); math.Abs(got/3-1) > 0.2 || up == 0 || up > 12 {
		t.Fatalf("after the step to 3: correction %.2f after %d moves; want ~3 in a few moves", got, up)
	}
	if m := feed(2000, 3); m != 0 {
		t.Fatalf("the correction kept moving (%d times) at a steady ratio", m)
	}
	down := feed(400, 1)
	if got := factorOf(&f, policy.RouteDecode, MetricTTFT); math.Abs(got-1) > 0.2 || down == 0 || down > 12 {
		t.Fatalf("after the step back: correction %.2f after %d moves", got, down)
	}
	// Other loops are untouched.
	if factorOf(&f, policy.RoutePrefill, MetricTTFT) != 1 || factorOf(&f, policy.RouteDecode, MetricTPOT) != 1 {
		t.Fatalf("other loops moved: %+v", f.corrections())
	}
}

// TestFeedbackBoundsAndJunk: corrections stay within [1/max, max]; samples without a forecast
// or with non-finite values are ignored; too few samples change nothing.
func TestFeedbackBoundsAndJunk(t *testing.T) {
	var f loop
	for range feedbackMinCount - 1 {
		f.observe(policy.RoutePrefill, MetricTPOT, 10, 1000, 1, 8)
	}
	if factorOf(&f, policy.RoutePrefill, MetricTPOT) != 1 {
		t.Fatal("moved before the minimum samples")
	}
	for range 200 {
		f.observe(policy.RoutePrefill, MetricTPOT, 10, 1000, 1, 8)
		f.observe(policy.RoutePrefillLocal, MetricTTFT, 1000, 1, 0.001, 4)
		f.observe(policy.RouteDecode, MetricTTFT, 0, 50, 1, 8)
		f.observe(policy.RouteDecode, MetricTTFT, math.Inf(1), 50, 1, 8)
		f.observe(policy.RouteDecode, MetricTTFT, 50, 50, 0, 8)
		f.observe(policy.RouteDecode, MetricTTFT, 50, 50, math.NaN(), 8)
		f.observe(policy.RouteDecode, MetricTTFT, 50, math.NaN(), 1, 8)
		f.observe(policy.Route(9), MetricTTFT, 50, 50, 1, 8)
	}
	if got := factorOf(&f, policy.RoutePrefill, MetricTPOT); got != 8 {
		t.Fatalf("100x slower than forecast: correction %v, want the bound 8", got)
	}
	if got := factorOf(&f, policy.RoutePrefillLocal, MetricTTFT); got != 0.25 {
		t.Fatalf("1000x faster: correction %v, want 1/4", got)
	}
	if got := factorOf(&f, policy.RouteDecode, MetricTTFT); got != 1 || f.cells[policy.RouteDecode][MetricTTFT].n != 0 {
		t.Fatalf("junk samples counted: %d", f.cells[policy.RouteDecode][MetricTTFT].n)
	}
}

// TestFeedbackCannotOscillate: a latency ratio that swings between 1/100 and 100 of the forecast
// every 200 samples, far past the bound 8. Each turn back needs a band twice as wide as the one
// before, and deviations are measured within the bound, so the loop turns back at most three
// times (the fourth would need a deviation wider than the whole range [1/8, 8]) and then holds,
// where a loop with a fixed band turns back on every swing.
func TestFeedbackCannotOscillate(t *testing.T) {
	var f loop
	for i := range 20000 {
		ratio := 100.0
		if i/200%2 == 1 {
			ratio = 1.0 / 100
		}
		f.observe(policy.RouteDecode, MetricTPOT, 10, 10*ratio, 0.01, 8)
	}
	c := &f.cells[policy.RouteDecode][MetricTPOT]
	if c.reversals > 3 || c.updates > 12 || c.updates == 0 {
		t.Fatalf("%d moves, %d of them reversals, over 100 swings: want at most 3 reversals", c.updates, c.reversals)
	}
}

// TestFeedbackLearnsOnlyBeyondObjective: latencies inside the objective are all equally good,
// so a forecast of 1 s that became 1.9 s under a 2 s objective (a loaded fleet whose requests
// still meet it) teaches nothing, where the plain ratio 1.9 would scale every forecast up.
// Forecasts near the objective whose requests miss it raise the correction by how far beyond
// the objective they land; forecasts beyond the objective whose requests meet it lower it.
func TestFeedbackLearnsOnlyBeyondObjective(t *testing.T) {
	var f loop
	for range 2000 {
		f.observe(policy.RouteDecode, MetricTTFT, 1000, 1900, 2000, 8)
	}
	if got := factorOf(&f, policy.RouteDecode, MetricTTFT); got != 1 {
		t.Fatalf("errors inside the objective moved the correction to %.2f", got)
	}
	for range 1000 {
		f.observe(policy.RouteDecode, MetricTTFT, 1500, 4500, 2000, 8)
	}
	if got := factorOf(&f, policy.RouteDecode, MetricTTFT); math.Abs(got/2.25-1) > 0.2 {
		t.Fatalf("requests forecast inside the objective landed 2.25x beyond it: correction %.2f, want ~2.25", got)
	}
	for range 1000 {
		f.observe(policy.RoutePrefill, MetricTPOT, 200, 20, 50, 8)
	}
	if got := factorOf(&f, policy.RoutePrefill, MetricTPOT); math.Abs(got/0.25-1) > 0.2 {
		t.Fatalf("forecasts 4x the objective met it: correction %.2f, want ~0.25 (the objective over the forecast)", got)
	}
}

// TestFeedbackLearnsOnlyNearObjective: a request forecast at a twentieth of its objective that
// missed it (the queue of the moment was not seen) says nothing of the placements forecast near
// the objective, the only ones a correction moves: it teaches nothing, where it would double
// the correction. Requests forecast at half the objective or more teach it.
func TestFeedbackLearnsOnlyNearObjective(t *testing.T) {
	var f loop
	for range 2000 {
		f.observe(policy.RouteDecode, MetricTPOT, 5, 200, 100, 8)
	}
	if got, n := factorOf(&f, policy.RouteDecode, MetricTPOT), f.cells[policy.RouteDecode][MetricTPOT].n; got != 1 || n != 0 {
		t.Fatalf("forecasts far inside the objective taught the loop: correction %.2f after %d samples", got, n)
	}
	for range 1000 {
		f.observe(policy.RouteDecode, MetricTPOT, 60, 200, 100, 8)
	}
	if got := factorOf(&f, policy.RouteDecode, MetricTPOT); math.Abs(got/2-1) > 0.2 {
		t.Fatalf("forecasts near the objective landed 2x beyond it: correction %.2f, want ~2", got)
	}
}
