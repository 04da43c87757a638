package route

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/condisagg/condisagg/kvindex"
)

// indexedBlocksDesc is condisagg_indexed_blocks{worker,medium}: the prefix index's entries per
// discovered worker and medium, read at scrape time (kvindex itself has no metrics).
var indexedBlocksDesc = prometheus.NewDesc("condisagg_indexed_blocks",
	"Prefix-index entries per worker and medium (gpu, cpu, disk).", []string{"worker", "medium"}, nil)

// indexCollector reports the index state of every discovered worker.
type indexCollector struct{ r *Router }

// IndexCollector returns a collector of condisagg_indexed_blocks for r's index and pool, and
// of the slo controller's state (condisagg_slo_feedback_*); register it on the same registry
// as the other metrics.
func (r *Router) IndexCollector() prometheus.Collector { return indexCollector{r} }

func (c indexCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- indexedBlocksDesc
	ch <- feedbackFactorDesc
	ch <- feedbackRatioDesc
	ch <- feedbackUpdatesDesc
	ch <- feedbackReversalsDesc
	ch <- feedbackBoundDesc
	ch <- adviceShareDesc
	ch <- adviceWorkersDesc
}

// The slo policy's controller, one series per placement and metric (feedback.go).
var (
	feedbackFactorDesc = prometheus.NewDesc("condisagg_slo_feedback_factor",
		"The slo policy's correction in force: its forecasts of this placement and metric are multiplied by it.", []string{"route", "metric"}, nil)
	feedbackRatioDesc = prometheus.NewDesc("condisagg_slo_feedback_ratio",
		"Smoothed observed/forecast latency the slo controller learned (0 before the first sample).", []string{"route", "metric"}, nil)
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

func (c indexCollector) Collect(ch chan<- prometheus.Metric) {
	if a := c.r.RoleAdvice(); a.Valid {
		ch <- prometheus.MustNewConstMetric(adviceShareDesc, prometheus.GaugeValue, a.PrefillShare)
		ch <- prometheus.MustNewConstMetric(adviceWorkersDesc, prometheus.GaugeValue, float64(a.PrefillWorkers))
	}
	ch <- prometheus.MustNewConstMetric(feedbackBoundDesc, prometheus.GaugeValue, max(c.r.policy.Load().Disagg.SLOFeedbackMax, 1))
	for _, f := range c.r.Feedback() {
		rt, m := f.Route.String(), f.Metric.String()
		ch <- prometheus.MustNewConstMetric(feedbackFactorDesc, prometheus.GaugeValue, f.Factor, rt, m)
		ch <- prometheus.MustNewConstMetric(feedbackRatioDesc, prometheus.GaugeValue, f.Ratio, rt, m)
		ch <- prometheus.MustNewConstMetric(feedbackUpdatesDesc, prometheus.CounterValue, float64(f.Updates), rt, m)
		ch <- prometheus.MustNewConstMetric(feedbackReversalsDesc, prometheus.CounterValue, float64(f.Reversals), rt, m)
	}
	for _, mod := range c.r.models { // worker ids are unique across models
		for _, w := range mod.pool.Workers() {
			st, ok := mod.index.Stats(kvindex.WorkerID(w.ID))
			if !ok {
				continue
			}
			for m := kvindex.Medium(0); m < kvindex.NumMedia; m++ {
				ch <- prometheus.MustNewConstMetric(indexedBlocksDesc, prometheus.GaugeValue, float64(st.Blocks[m]), w.ID, m.String())
			}
		}
	}
}
