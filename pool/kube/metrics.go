package kube

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the gauges and counters of Kubernetes discovery. Build them with NewMetrics on
// an injected registry.
type Metrics struct {
	Workers *prometheus.GaugeVec   // role: workers (data-parallel ranks) discovery has in the pool
	Errors  *prometheus.CounterVec // reason: skipped slices and endpoints, rejected members, failed watches
}

// NewMetrics registers the discovery metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Workers: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "condisagg_discovery_workers",
			Help: "Workers (one per data-parallel rank) that Kubernetes EndpointSlice discovery has in the pool, by role."}, []string{"role"}),
		Errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "condisagg_discovery_errors_total",
			Help: "Kubernetes discovery problems by reason: failed list/watch calls, and per sync every skipped slice or endpoint and refused member."},
			[]string{"reason"}),
	}
	reg.MustRegister(m.Workers, m.Errors)
	return m
}
