package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/condisagg/condisagg/kvindex"
	"github.com/condisagg/condisagg/route"
)

// indexedBlocksDesc is condisagg_indexed_blocks{worker,medium}: the prefix index's entries per
// discovered worker and medium, read at scrape time (kvindex itself has no metrics, and the
// router only decides; serve owns what it exports).
var indexedBlocksDesc = prometheus.NewDesc("condisagg_indexed_blocks",
	"Prefix-index entries per worker and medium (gpu, cpu, disk).", []string{"worker", "medium"}, nil)

// indexCollector reports the index state of every discovered worker of every served model.
// models is the router's Models: it is read at each scrape because discovery adds and removes
// workers.
type indexCollector struct{ models func() []route.ModelInfo }

func (c indexCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- indexedBlocksDesc
}

func (c indexCollector) Collect(ch chan<- prometheus.Metric) {
	for _, mod := range c.models() { // worker ids are unique across models
		if mod.Pool == nil || mod.Index == nil {
			continue
		}
		for _, w := range mod.Pool.Workers() {
			st, ok := mod.Index.Stats(kvindex.WorkerID(w.ID))
			if !ok {
				continue
			}
			for m := kvindex.Medium(0); m < kvindex.NumMedia; m++ {
				ch <- prometheus.MustNewConstMetric(indexedBlocksDesc, prometheus.GaugeValue, float64(st.Blocks[m]), w.ID, m.String())
			}
		}
	}
}

// The session table's state (route.Router.SessionStats), read at scrape time: the router
// keeps the counters, serve exports them. The per-decision outcomes are extproc's
// condisagg_session_affinity_total.
var (
	sessionBindingsDesc = prometheus.NewDesc("condisagg_session_bindings",
		"Session bindings held (session affinity).", nil, nil)
	sessionDroppedDesc = prometheus.NewDesc("condisagg_session_bindings_dropped_total",
		"Session bindings dropped: expired (unused past session.ttl) or evicted (table full, least recently used).",
		[]string{"cause"}, nil)
)

// sessionCollector reports the session table of a router with session affinity on.
type sessionCollector struct{ stats func() route.SessionStats }

func (c sessionCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- sessionBindingsDesc
	ch <- sessionDroppedDesc
}

func (c sessionCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.stats()
	ch <- prometheus.MustNewConstMetric(sessionBindingsDesc, prometheus.GaugeValue, float64(st.Bindings))
	ch <- prometheus.MustNewConstMetric(sessionDroppedDesc, prometheus.CounterValue, float64(st.Expired), "expired")
	ch <- prometheus.MustNewConstMetric(sessionDroppedDesc, prometheus.CounterValue, float64(st.Evicted), "evicted")
}
