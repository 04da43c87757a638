package vllmsim

import (
	"strconv"
	"time"

	"github.com/condisagg/condisagg/sim"
	"github.com/prometheus/client_golang/prometheus"
)

// serverMetrics are the vLLM metrics vllm-sim exposes under vLLM's own names
// (vllm-kv-events.md §6.1), so routers scrape it as they scrape vLLM. Latencies are in
// simulated seconds (wall seconds × time scale).
// Every series carries engine="<data-parallel rank>", one set per rank, as vLLM labels them.
type serverMetrics struct {
	ttft, itl, e2e []prometheus.Observer // by rank
}

func newServerMetrics(reg prometheus.Registerer, model string, ws []*Worker, nixl bool) (*serverMetrics, error) {
	m := &serverMetrics{}
	for rank, w := range ws {
		if err := m.addEngine(reg, model, rank, w); err != nil {
			return nil, err
		}
		if nixl {
			if err := reg.Register(newNIXLCollector(model, rank, w)); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// nixlCollector exposes the KV transfers an engine received under the names of vLLM's
// NixlConnector stats: vllm:nixl_xfer_time_seconds and vllm:nixl_bytes_transferred, one
// observation per completed transfer (sim.Stats.KVTransfers). Only _sum and _count are kept
// (the +Inf bucket): what a client reads per transfer is the change of both across it. The
// time is the transfer's simulated duration, CostModel.TransferTime of the tokens it filled.
type nixlCollector struct {
	w           *Worker
	time, bytes *prometheus.Desc
}

func newNIXLCollector(model string, rank int, w *Worker) *nixlCollector {
	labels := prometheus.Labels{"model_name": model, "engine": strconv.Itoa(rank)}
	return &nixlCollector{w: w,
		time:  prometheus.NewDesc("vllm:nixl_xfer_time_seconds", "Histogram of transfer duration for NIXL KV Cache transfers.", nil, labels),
		bytes: prometheus.NewDesc("vllm:nixl_bytes_transferred", "Histogram of bytes transferred per NIXL KV Cache transfers.", nil, labels)}
}

func (c *nixlCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.time; ch <- c.bytes }

func (c *nixlCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.w.Stats()
	ch <- prometheus.MustNewConstHistogram(c.time, s.KVTransfers, s.KVTransferTime.Seconds(), nil)
	ch <- prometheus.MustNewConstHistogram(c.bytes, s.KVTransfers, s.KVTransferBytes, nil)
}

// addEngine registers the series of one engine (data-parallel rank).
func (m *serverMetrics) addEngine(reg prometheus.Registerer, model string, rank int, w *Worker) error {
	engine := strconv.Itoa(rank)
	labels := prometheus.Labels{"model_name": model, "engine": engine}
	stat := func(f func(sim.Stats) float64) func() float64 { return func() float64 { return f(w.Stats()) } }
	cfg := w.Config()
	buckets := []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80}
	ttft := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "vllm:time_to_first_token_seconds", Help: "Histogram of time to first token in seconds.", ConstLabels: labels, Buckets: buckets})
	itl := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "vllm:inter_token_latency_seconds", Help: "Histogram of inter-token latency in seconds.", ConstLabels: labels, Buckets: buckets})
	e2e := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "vllm:e2e_request_latency_seconds", Help: "Histogram of e2e request latency in seconds.", ConstLabels: labels, Buckets: buckets})
	cs := []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "vllm:num_requests_running", Help: "Number of requests in model execution batches.", ConstLabels: labels},
			stat(func(s sim.Stats) float64 { return float64(s.Running) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "vllm:num_requests_waiting", Help: "Number of requests waiting to be processed.", ConstLabels: labels},
			stat(func(s sim.Stats) float64 { return float64(s.Waiting + s.Transferring) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "vllm:kv_cache_usage_perc", Help: "KV-cache usage. 1 means 100 percent usage.", ConstLabels: labels},
			stat(sim.Stats.KVUsage)),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "vllm:prefix_cache_queries_total", Help: "Prefix cache queries, in terms of number of queried tokens.", ConstLabels: labels},
			stat(func(s sim.Stats) float64 { return float64(s.PrefixQueries) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "vllm:prefix_cache_hits_total", Help: "Prefix cache hits, in terms of number of cached tokens.", ConstLabels: labels},
			stat(func(s sim.Stats) float64 { return float64(s.PrefixHits) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "vllm:num_preemptions_total", Help: "Cumulative number of preemption from the engine.", ConstLabels: labels},
			stat(func(s sim.Stats) float64 { return float64(s.Preemptions) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "vllm:prompt_tokens_total", Help: "Number of prefill tokens processed.", ConstLabels: labels},
			stat(func(s sim.Stats) float64 { return float64(s.PromptTokens) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "vllm:generation_tokens_total", Help: "Number of generation tokens processed.", ConstLabels: labels},
			stat(func(s sim.Stats) float64 { return float64(s.GenerationTokens) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "vllm:cache_config_info", Help: "Information of the LLMEngine CacheConfig",
			ConstLabels: prometheus.Labels{"engine": engine, "block_size": strconv.Itoa(cfg.BlockSize), "num_gpu_blocks": strconv.Itoa(cfg.NumGPUBlocks),
				"enable_prefix_caching": "True", "prefix_caching_hash_algo": "xxhash", "cache_dtype": "auto", "gpu_memory_utilization": "0.9"}},
			func() float64 { return 1 }),
		ttft, itl, e2e,
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	m.ttft, m.itl, m.e2e = append(m.ttft, ttft), append(m.itl, itl), append(m.e2e, e2e)
	return nil
}

func (m *serverMetrics) observeEnd(out *outputs, arrival time.Time, scale float64) {
	if out.first.IsZero() {
		return
	}
	m.ttft[out.rank].Observe(out.first.Sub(arrival).Seconds() * scale)
	m.e2e[out.rank].Observe(out.last.Sub(arrival).Seconds() * scale)
}
