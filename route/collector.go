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

// IndexCollector returns a collector of condisagg_indexed_blocks for r's indexes and pools;
// register it on the same registry as the other metrics.
func (r *Router) IndexCollector() prometheus.Collector { return indexCollector{r} }

func (c indexCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- indexedBlocksDesc
}

func (c indexCollector) Collect(ch chan<- prometheus.Metric) {
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
