package feedback

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/condisagg/condisagg/policy"
)

// The slo policy's closed loop. The cost model forecasts from booked load at decision time; it
// cannot see queueing that builds after, interference it does not model, or a fleet that is
// not the GPU it was calibrated on. The response phase (extproc's observer, the simulator's
// token clock) reports the TTFT and TPOT each request really had beside what was forecast for
// it; the controller keeps, per placement and per metric, a smoothed ratio observed/forecast
// and the correction policy.Decide multiplies its forecasts with.
//
// Stability: the correction in force moves only when the smoothed ratio leaves a deadband
// around it, and never sooner than feedbackDwell samples after its last move (the smoothed
// ratio must first show what the last correction did). The band is twice as wide for a move
// that would turn back, and doubles again with every turn back already made, so a loop that
// keeps reversing needs ever clearer evidence to do it again: reversals are bounded by the
// configured bounds [1/max, max] (Disagg.SLOFeedbackMax) however the load moves. Noise inside the
// deadband never moves it; a step change in load moves it a few times and then holds
// (TestFeedbackStepChange, cluster's TestSLOControllerUnderLoadStep).
//
// Error that decides nothing is not learned: a sample's forecast and observation each count as
// at least the request's objective, so the ratio measures only how far beyond the objective
// one of them fell. Inside the objective every latency is equally good, and a forecast of
// 20 ms that became 240 ms under a 2 s objective says nothing about the placements the
// correction would move (those forecast near the objective); scaling every forecast by such
// ratios pushed placements with room to spare into the overload rule, and the placements it
// made there raised the observed ratios further: goodput fell 4-9 % on b2b with slo_fleet
// (docs/results.md, "The controller on the fleet's view"). With the floor the loop moves only
// when requests really miss the objective, or when forecasts beyond it are not borne out
// (TestFeedbackLearnsOnlyBeyondObjective); and it learns only from requests forecast at half
// the objective or more (feedbackNear), the placements its correction would move
// (TestFeedbackLearnsOnlyNearObjective). The policy, for its part, never lets a correction
// alone send a request to its overload rule (policy.decideSLO).

// Controller constants: the smoothing weight of a sample, the samples a metric needs before
// its first correction, the samples between two moves, and the relative deadband.
const (
	feedbackAlpha    = 0.03
	feedbackMinCount = 20
	feedbackDwell    = 50
	feedbackDeadband = 0.3
	// feedbackNear is the share of the objective a forecast must reach for its sample to
	// teach the loop: a correction moves the placements forecast near the objective, so it
	// is measured on those. A forecast of a tenth of the objective whose request missed it
	// says the queue of the moment was not seen, not that forecasts near the objective are
	// short by that much (conversation-x2 500 ms/30 ms: learning from every placement cost
	// up to 2.7 % of goodput, docs/results.md "The controller on the fleet's view").
	feedbackNear = 0.5
)

// Metric names a forecast the controller corrects.
type Metric uint8

const (
	MetricTTFT Metric = iota
	MetricTPOT
	numMetrics
)

func (m Metric) String() string {
	if m == MetricTPOT {
		return "tpot"
	}
	return "ttft"
}

// feedbackCell is one (placement, metric) loop.
type feedbackCell struct {
	ewma      float64 // smoothed observed/forecast; 0 before the first sample
	n         int
	since     int           // samples since the last move
	updates   uint64        // times the correction in force changed
	reversals uint64        // changes whose direction differs from the change before (oscillation)
	lastUp    int8          // +1 the last change went up, -1 down, 0 none yet
	factor    atomic.Uint64 // math.Float64bits of the correction in force (0 = 1)
}

// loop is the controller state.
type loop struct {
	mu    sync.Mutex // guards every cell's ewma, n and updates
	cells [policy.NumRoutes][numMetrics]feedbackCell
}

// State is one loop's state, for metrics, the simulator's report and Explain.
type State struct {
	Route     policy.Route
	Metric    Metric
	Factor    float64 // the correction in force
	Ratio     float64 // the smoothed observed/forecast (0: no sample yet)
	Samples   int
	Updates   uint64
	Reversals uint64 // updates that turned back: an oscillating loop has many
}

// observe feeds one request's observed latency of metric for placement rt, beside the cost
// model's uncorrected forecast for it and the request's objective for the metric (all in ms).
// Samples without a forecast or an objective, or non-finite ones, are ignored. bound is the
// configured maximum correction (policy.Disagg.SLOFeedbackMax).
func (f *loop) observe(rt policy.Route, m Metric, forecastMS, observedMS, objectiveMS, bound float64) {
	if int(rt) >= policy.NumRoutes || m >= numMetrics || !(forecastMS > 0) || !(observedMS >= 0) ||
		!(objectiveMS > 0) || math.IsInf(forecastMS, 0) || math.IsInf(observedMS, 0) || math.IsInf(objectiveMS, 0) {
		return
	}
	c := &f.cells[rt][m]
	cur := math.Float64frombits(c.factor.Load())
	if cur == 0 {
		cur = 1
	}
	if forecastMS < feedbackNear*objectiveMS {
		return // far inside the objective: not a placement a correction would move
	}
	// Both floored at the objective: only error beyond it can change whether a placement meets it.
	ratio := max(observedMS, objectiveMS) / max(forecastMS, objectiveMS)
	f.mu.Lock()
	defer f.mu.Unlock()
	if c.n == 0 {
		c.ewma = ratio
	} else {
		c.ewma += feedbackAlpha * (ratio - c.ewma)
	}
	c.n++
	c.since++
	// Hysteresis in log space, twice as wide against the direction of the last change and
	// twice again per reversal so far: a loop that follows a trend moves freely, one that would
	// turn back needs a clear reason, and one that has turned back before a clearer one.
	// The deviation is measured to the ratio clamped to the bound, where the correction would
	// go: so it never exceeds the width of the range, which bounds the reversals.
	bound = max(bound, 1)
	next := min(max(c.ewma, 1/bound), bound)
	dev := math.Log(next / cur)
	band := math.Log1p(feedbackDeadband)
	if (dev > 0 && c.lastUp < 0) || (dev < 0 && c.lastUp > 0) {
		band *= 2 * math.Exp2(float64(min(c.reversals, 16)))
	}
	if c.n < feedbackMinCount || (c.updates > 0 && c.since < feedbackDwell) || math.Abs(dev) <= band {
		return
	}
	if next != cur {
		c.since = 0
		c.factor.Store(math.Float64bits(next))
		c.updates++
		dir := int8(1)
		if next < cur {
			dir = -1
		}
		if c.lastUp != 0 && dir != c.lastUp {
			c.reversals++
		}
		c.lastUp = dir
	}
}

// corrections are the corrections in force, as policy.Input.Feedback takes them.
func (f *loop) corrections() (out [policy.NumRoutes]policy.Correction) {
	for r := range out {
		out[r].TTFT = math.Float64frombits(f.cells[r][MetricTTFT].factor.Load())
		out[r].TPOT = math.Float64frombits(f.cells[r][MetricTPOT].factor.Load())
	}
	return out
}

// state reports every loop of the controller.
func (f *loop) state() []State {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []State
	for _, rt := range policy.Routes() {
		for m := range numMetrics {
			c := &f.cells[rt][m]
			fac := math.Float64frombits(c.factor.Load())
			if fac == 0 {
				fac = 1
			}
			out = append(out, State{Route: rt, Metric: m, Factor: fac, Ratio: c.ewma, Samples: c.n,
				Updates: c.updates, Reversals: c.reversals})
		}
	}
	return out
}

// Forecasts is the cost model's own forecast of TTFT and TPOT (the corrections they carried
// taken out) for placement r of decision d: what the controller compares the observations of
// that request with. Both are 0 when no forecast chose the placement: another policy, or the
// slo policy's overload placement, chosen by cost after every forecast missed the objective
// (its observations say nothing of the error of forecasts that steer a choice, and feeding
// them made the controller turn back and forth under a load step).
func Forecasts(d *policy.Decision, r policy.Route) (ttft, tpot float64) {
	e := &d.Inputs.Estimates[r]
	if !e.Valid || d.Reason == policy.ReasonSLOOverloadBypass || d.Reason == policy.ReasonSLOOverloadPrefillLocal {
		return 0, 0
	}
	return e.TTFTms / factor(e.TTFTFactor), e.TPOTms / factor(e.TPOTFactor)
}

func factor(f float64) float64 {
	if f <= 0 {
		return 1
	}
	return f
}

// Objectives is the objective of decision d's request for TTFT and TPOT in ms (the slo
// policy's, the request's own when it carried one): the floor of the controller's samples.
// Both are 0 for a decision of another policy.
func Objectives(d *policy.Decision) (ttft, tpot float64) {
	o := d.Inputs.SLO
	return float64(o.TTFT) / float64(time.Millisecond), float64(o.TPOT) / float64(time.Millisecond)
}
