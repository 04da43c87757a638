package kvzmq

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/condisagg/condisagg/kvevents"
)

// Metrics are the ingestion counters: the core's apply counters (embedded, handed to every
// Applier) plus the transport's sequence, replay and freshness counters. Build them with
// NewMetrics on an injected registry (never the global one); a nil *Metrics is not allowed.
//
// The shell also writes the embedded DroppedFrames (kvevents.DropReason values) and Clears
// (kvevents.ClearReason values): one metric per name, whichever side noticed.
type Metrics struct {
	*kvevents.Metrics

	Gaps           *prometheus.CounterVec // worker: sequence gaps detected
	Replays        *prometheus.CounterVec // worker, outcome: replay attempts (success, lost, mismatch)
	HistoryLost    *prometheus.CounterVec // worker: stream cleared because history could not be recovered
	Restarts       *prometheus.CounterVec // worker: publisher restarts detected (seq went back)
	Reconnects     *prometheus.CounterVec // worker: transport reconnects
	LastSeq        *prometheus.GaugeVec   // worker: last applied sequence number
	LastEventUnix  *prometheus.GaugeVec   // worker: wall clock of the last applied batch (seconds)
	EventLagSecond prometheus.Histogram   // now - batch ts, seconds
}

// NewMetrics registers the core's apply metrics and the transport metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	cv := func(name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "condisagg_kv_" + name, Help: help}, labels)
		reg.MustRegister(c)
		return c
	}
	gv := func(name, help string, labels ...string) *prometheus.GaugeVec {
		g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "condisagg_kv_" + name, Help: help}, labels)
		reg.MustRegister(g)
		return g
	}
	m := &Metrics{
		Metrics:       kvevents.NewMetrics(reg),
		Gaps:          cv("gaps_total", "Sequence gaps detected.", "worker"),
		Replays:       cv("replays_total", "Replay attempts, by outcome.", "worker", "outcome"),
		HistoryLost:   cv("history_lost_total", "Streams cleared because the missed history could not be replayed.", "worker"),
		Restarts:      cv("publisher_restarts_total", "Publisher restarts detected (sequence went back).", "worker"),
		Reconnects:    cv("reconnects_total", "Transport reconnects to the worker's publisher.", "worker"),
		LastSeq:       gv("last_seq", "Last applied sequence number.", "worker"),
		LastEventUnix: gv("last_event_timestamp_seconds", "Wall clock of the last applied batch.", "worker"),
		EventLagSecond: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "condisagg_kv_event_lag_seconds",
			Help:    "Receive time minus the batch's engine timestamp.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
	}
	reg.MustRegister(m.EventLagSecond)
	return m
}
