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
}

// The slo policy's controller, one series per placement and metric (feedback.go).
var (
	feedbackFactorDesc = prometheus.NewDesc("condisagg_slo_feedback_factor",
		"The slo policy's correction in force: its forecasts of this placement and metric are multiplied by it.", []string{"route", "metric"}, nil)
	feedbackRatioDesc = prometheus.NewDesc("condisagg_slo_feedback_ratio",
		"Smoothed observed/forecast latency the slo controller learned (0 before the first sample).", []string{"route", "metric"}, nil)
	feedbackUpdatesDesc = prometheus.NewDesc("condisagg_slo_feedback_updates_total",
		"Times the slo controller changed the correction in force (hysteresis: a steady ratio changes nothing).", []string{"route", "metric"}, nil)
)

func (c indexCollector) Collect(ch chan<- prometheus.Metric) {
	for _, f := range c.r.Feedback() {
		rt, m := f.Route.String(), f.Metric.String()
		ch <- prometheus.MustNewConstMetric(feedbackFactorDesc, prometheus.GaugeValue, f.Factor, rt, m)
		ch <- prometheus.MustNewConstMetric(feedbackRatioDesc, prometheus.GaugeValue, f.Ratio, rt, m)
		ch <- prometheus.MustNewConstMetric(feedbackUpdatesDesc, prometheus.CounterValue, float64(f.Updates), rt, m)
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
