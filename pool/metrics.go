package pool

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the pool's gauges and counters. Build them with NewMetrics on an injected
// registry; the `worker` label comes from discovery and is deleted when the worker leaves.
type Metrics struct {
	ActivePrefillTokens *prometheus.GaugeVec   // worker: apt
	ActiveDecodeBlocks  *prometheus.GaugeVec   // worker: adb
	ActiveRequests      *prometheus.GaugeVec   // worker: open bookings
	KVCapacityBlocks    *prometheus.GaugeVec   // worker: kvcap, -1 unknown
	Healthy             *prometheus.GaugeVec   // worker, role: 1 eligible, 0 not
	Workers             *prometheus.GaugeVec   // role: discovered workers
	Bookings            prometheus.Gauge       // open bookings
	Expired             prometheus.Counter     // bookings released by the TTL sweep
	GuardCommitDenied   prometheus.Counter     // bypass commits denied by the decode-busy guard
	ResolveErrors       *prometheus.CounterVec // name: failed DNS lookups
	Scrapes             *prometheus.CounterVec // worker, outcome: /metrics scrapes (ok, http_error, parse_error)
	HealthTransitions   *prometheus.CounterVec // worker, reason: eligibility changes (HealthReason)
	HealthProbes        *prometheus.CounterVec // worker, outcome: health probes (ok, failed, timeout, refused)
	PeerBookings        prometheus.Gauge       // other replicas' open bookings held (ApplyPeer)
	PeerRejected        *prometheus.CounterVec // reason: peer bookings refused (invalid, unknown_worker, full)
	PeerExpired         prometheus.Counter     // peer bookings dropped when their lease ran out
}

// NewMetrics registers the pool metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	gv := func(name, help string, labels ...string) *prometheus.GaugeVec {
		g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "condisagg_" + name, Help: help}, labels)
		reg.MustRegister(g)
		return g
	}
	cv := func(name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "condisagg_" + name, Help: help}, labels)
		reg.MustRegister(c)
		return c
	}
	m := &Metrics{
		ActivePrefillTokens: gv("active_prefill_tokens", "Router-booked uncached prompt tokens whose prefill has not finished.", "worker"),
		ActiveDecodeBlocks:  gv("active_decode_blocks", "Router-booked decode KV blocks (unique, reference-counted).", "worker"),
		ActiveRequests:      gv("active_requests", "Open bookings touching the worker.", "worker"),
		KVCapacityBlocks:    gv("kv_capacity_blocks", "Worker KV capacity in blocks; -1 unknown.", "worker"),
		Healthy:             gv("worker_healthy", "1 if the worker is eligible for selection (no health input excludes it).", "worker", "role"),
		Workers:             gv("pool_workers", "Discovered workers by role.", "role"),
		Bookings:            prometheus.NewGauge(prometheus.GaugeOpts{Name: "condisagg_accounting_open_bookings", Help: "Open bookings."}),
		Expired:             prometheus.NewCounter(prometheus.CounterOpts{Name: "condisagg_accounting_expired_total", Help: "Bookings released by the TTL sweep."}),
		GuardCommitDenied:   prometheus.NewCounter(prometheus.CounterOpts{Name: "condisagg_guard_commit_denied_total", Help: "Bypass commits denied by the decode-busy guard re-check."}),
		ResolveErrors:       cv("pool_resolve_errors_total", "Failed DNS lookups of worker endpoints.", "name"),
		Scrapes:             cv("pool_scrapes_total", "vLLM /metrics scrapes by outcome.", "worker", "outcome"),
		HealthTransitions:   cv("worker_health_transitions_total", "Changes of a worker's eligibility, by the reason of the change.", "worker", "reason"),
		HealthProbes:        cv("pool_health_probes_total", "Worker health probes by outcome.", "worker", "outcome"),
		PeerBookings:        prometheus.NewGauge(prometheus.GaugeOpts{Name: "condisagg_peer_bookings", Help: "Open bookings of other router replicas counted in the load (shared bookings)."}),
		PeerRejected:        cv("peer_bookings_rejected_total", "Peer bookings refused, by reason (invalid, unknown_worker, full).", "reason"),
		PeerExpired:         prometheus.NewCounter(prometheus.CounterOpts{Name: "condisagg_peer_bookings_expired_total", Help: "Peer bookings dropped when their lease ran out (a silent peer, a lost release)."}),
	}
	reg.MustRegister(m.Bookings, m.Expired, m.GuardCommitDenied, m.PeerBookings, m.PeerExpired)
	return m
}

// workerGauges caches one worker's gauge children so accounting updates do no label lookups.
type workerGauges struct {
	apt, adb, requests, kvCap, healthy prometheus.Gauge
}

func (m *Metrics) workerGauges(id string, role Role) workerGauges {
	return workerGauges{
		apt:      m.ActivePrefillTokens.WithLabelValues(id),
		adb:      m.ActiveDecodeBlocks.WithLabelValues(id),
		requests: m.ActiveRequests.WithLabelValues(id),
		kvCap:    m.KVCapacityBlocks.WithLabelValues(id),
		healthy:  m.Healthy.WithLabelValues(id, string(role)),
	}
}

func (m *Metrics) deleteWorker(id string) {
	for _, g := range []*prometheus.GaugeVec{m.ActivePrefillTokens, m.ActiveDecodeBlocks, m.ActiveRequests, m.KVCapacityBlocks} {
		g.DeleteLabelValues(id)
	}
	m.Healthy.DeletePartialMatch(prometheus.Labels{"worker": id})
	for _, c := range []*prometheus.CounterVec{m.Scrapes, m.HealthTransitions, m.HealthProbes} {
		c.DeletePartialMatch(prometheus.Labels{"worker": id})
	}
}
