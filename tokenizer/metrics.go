package tokenizer

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics exports the segment-cache counters of the tokenizer in service. Build
// it with NewMetrics on an injected registry and point it at a Tokenizer with
// Track (again after a reload: counters carry over, so they never go back).
type Metrics struct {
	hits, misses, evictions *prometheus.Desc
	entries, bytes          *prometheus.Desc

	mu   sync.Mutex // guards tk, base
	tk   *Tokenizer
	base CacheStats // counters of tokenizers tracked before tk
}

// NewMetrics registers the tokenizer metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("condisagg_tokenizer_segment_cache_"+name, help, nil, nil)
	}
	m := &Metrics{
		hits:      d("hits_total", "Segments served from the prefix-aware segment cache."),
		misses:    d("misses_total", "Segments encoded because they were not cached."),
		evictions: d("evictions_total", "Segments evicted from the cache to stay within its bounds."),
		entries:   d("entries", "Segments held by the cache."),
		bytes:     d("bytes", "Approximate bytes held by the cache."),
	}
	reg.MustRegister(m)
	return m
}

// Track makes tk the tokenizer whose cache is reported.
func (m *Metrics) Track(tk *Tokenizer) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.tk != nil && m.tk != tk {
		old := m.tk.CacheStats()
		m.base.Hits += old.Hits
		m.base.Misses += old.Misses
		m.base.Evictions += old.Evictions
	}
	m.tk = tk
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.hits, m.misses, m.evictions, m.entries, m.bytes} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	st, base := CacheStats{}, m.base
	if m.tk != nil {
		st = m.tk.CacheStats()
	}
	m.mu.Unlock()
	counter := func(d *prometheus.Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	counter(m.hits, base.Hits+st.Hits)
	counter(m.misses, base.Misses+st.Misses)
	counter(m.evictions, base.Evictions+st.Evictions)
	ch <- prometheus.MustNewConstMetric(m.entries, prometheus.GaugeValue, float64(st.Entries))
	ch <- prometheus.MustNewConstMetric(m.bytes, prometheus.GaugeValue, float64(st.Bytes))
}
