package feedback

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/condisagg/condisagg/policy"
)

// The slo policy's controller, one series per placement and metric (feedback.go).
var (
	feedbackFactorDesc = prometheus.NewDesc("condisagg_slo_feedback_factor",
		"The slo policy's correction in force: its forecasts of this placement and metric are multiplied by it.", []string{"route", "metric"}, nil)
	feedbackRatioDesc = prometheus.NewDesc("condisagg_slo_feedback_ratio",
		"Smoothed observed/forecast latency the slo controller learned, each counted as at least the request's objective (0 before the first sample).", []string{"route", "metric"}, nil)
	feedbackUpdatesDesc = prometheus.NewDesc("condisagg_slo_feedback_updates_total",
		"Times the slo controller changed the correction in force (hysteresis: a steady ratio changes nothing).", []string{"route", "metric"}, nil)
	// Reversals and the bound exist for the alert rules: a loop whose changes keep turning back
	// oscillates, and a factor at the bound can correct no further.
	feedbackReversalsDesc = prometheus.NewDesc("condisagg_slo_feedback_reversals_total",
		"Changes of the correction in force that went the other way than the change before (an oscillating loop has many).", []string{"route", "metric"}, nil)
	feedbackBoundDesc = prometheus.NewDesc("condisagg_slo_feedback_bound",
		"The configured bound of the slo controller's correction (slo_feedback_max): factors stay in [1/bound, bound].", nil, nil)
)

// The role-balance advice from the observed mix (advice.go), only once it is valid.
var (
	adviceShareDesc = prometheus.NewDesc("condisagg_role_advice_prefill_share",
		"Share of the fleet's GPU time the observed mix needs for prefill (slo policy's cost model and objective).", nil, nil)
	adviceWorkersDesc = prometheus.NewDesc("condisagg_role_advice_prefill_workers",
		"Prefill workers the observed mix calls for, out of the fleet's workers (analytic; condisagg tune --role-advice checks it).", nil, nil)
)

// collector reports a Learner's state at scrape time.
type collector struct {
	l       *Learner
	cfg     func() *policy.Config
	workers func() int
}

// NewCollector returns a collector of the controller's state (condisagg_slo_feedback_*) and of
// the role advice (condisagg_role_advice_*, once valid). cfg is the policy config in force
// (its feedback bound and cost model); workers the size of the fleet the advice is for.
func NewCollector(l *Learner, cfg func() *policy.Config, workers func() int) prometheus.Collector {
	return collector{l: l, cfg: cfg, workers: workers}
}

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- feedbackFactorDesc
	ch <- feedbackRatioDesc
	ch <- feedbackUpdatesDesc
	ch <- feedbackReversalsDesc
	ch <- feedbackBoundDesc
	ch <- adviceShareDesc
	ch <- adviceWorkersDesc
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	cfg := c.cfg()
	if a := c.l.Advice(cfg, c.workers()); a.Valid {
		ch <- prometheus.MustNewConstMetric(adviceShareDesc, prometheus.GaugeValue, a.PrefillShare)
		ch <- prometheus.MustNewConstMetric(adviceWorkersDesc, prometheus.GaugeValue, float64(a.PrefillWorkers))
	}
	ch <- prometheus.MustNewConstMetric(feedbackBoundDesc, prometheus.GaugeValue, max(cfg.Disagg.SLOFeedbackMax, 1))
	for _, f := range c.l.State() {
		rt, m := f.Route.String(), f.Metric.String()
		ch <- prometheus.MustNewConstMetric(feedbackFactorDesc, prometheus.GaugeValue, f.Factor, rt, m)
		ch <- prometheus.MustNewConstMetric(feedbackRatioDesc, prometheus.GaugeValue, f.Ratio, rt, m)
		ch <- prometheus.MustNewConstMetric(feedbackUpdatesDesc, prometheus.CounterValue, float64(f.Updates), rt, m)
		ch <- prometheus.MustNewConstMetric(feedbackReversalsDesc, prometheus.CounterValue, float64(f.Reversals), rt, m)
	}
}
