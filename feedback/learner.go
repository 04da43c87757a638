package feedback

import "github.com/condisagg/condisagg/policy"

// Learner is what condisagg learns from the answers to its decisions: the slo policy's
// closed loop (loop.go) and the observed request mix behind the role advice (advice.go). The
// router reads its corrections at every decision and its tickets report every answer; the
// server's metrics, the simulator's report and the status page read its state. It is safe
// for concurrent use.
type Learner struct {
	loop loop
	mix  mixCounts
}

// New returns a Learner that has learned nothing: every correction 1, no advice.
func New() *Learner { return &Learner{} }

// Corrections are the corrections in force, as policy.Input.Feedback takes them.
func (l *Learner) Corrections() [policy.NumRoutes]policy.Correction { return l.loop.corrections() }

// ObserveLatency feeds the controller one observed latency (ms) of metric m of a request
// placed on rt, beside the cost model's uncorrected forecast for it (ms, Forecasts) and the
// request's objective for m (ms, Objectives); bound is the configured maximum correction
// (policy.Disagg.SLOFeedbackMax). Samples without a forecast or an objective, or non-finite
// ones, are ignored.
func (l *Learner) ObserveLatency(rt policy.Route, m Metric, forecastMS, observedMS, objectiveMS, bound float64) {
	l.loop.observe(rt, m, forecastMS, observedMS, objectiveMS, bound)
}

// ObserveRouted counts one booked decision: its prompt length and the prompt tokens some
// worker computes (policy.Decision.PrefillTokens).
func (l *Learner) ObserveRouted(isl int, prefillTokens int64) { l.mix.routed(isl, prefillTokens) }

// ObserveOutput counts the output length of one finished answer (ignored when not positive).
func (l *Learner) ObserveOutput(tokens int) { l.mix.output(tokens) }

// State reports every loop of the controller.
func (l *Learner) State() []State { return l.loop.state() }

// Advice prices the observed mix for a fleet of workers (both roles) under cfg.
func (l *Learner) Advice(cfg *policy.Config, workers int) RoleAdvice {
	return l.mix.advice(cfg, workers)
}
