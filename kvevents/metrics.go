package kvevents

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the event-ingestion counters. Build them with NewMetrics on an injected registry
// (never the global one); a nil *Metrics is not allowed, tests make their own registry.
//
// Label cardinality is bounded: `worker` comes from the configured worker list, `reason`,
// `medium` and `tag` from closed sets (unknown values are folded into "other").
type Metrics struct {
	Batches        *prometheus.CounterVec // worker: batches applied
	Events         *prometheus.CounterVec // worker, kind: events applied to the index
	SkippedEvents  *prometheus.CounterVec // worker, reason: events skipped (malformed_event, parent_not_found, ...)
	UnknownEvents  *prometheus.CounterVec // worker, tag: events with an unknown tag
	NonGPUMedium   *prometheus.CounterVec // worker, medium: events on a non-device medium
	DroppedFrames  *prometheus.CounterVec // worker, reason: live or replay messages dropped (frames, seq_size, too_large, rank_mismatch, decode_error)
	Gaps           *prometheus.CounterVec // worker: sequence gaps detected
	Replays        *prometheus.CounterVec // worker, outcome: replay attempts (success, lost)
	HistoryLost    *prometheus.CounterVec // worker: stream cleared because history could not be recovered
	Restarts       *prometheus.CounterVec // worker: publisher restarts detected (seq went back)
	Reconnects     *prometheus.CounterVec // worker: transport reconnects
	Clears         *prometheus.CounterVec // worker, reason: stream index cleared
	LastSeq        *prometheus.GaugeVec   // worker: last applied sequence number
	LastEventUnix  *prometheus.GaugeVec   // worker: wall clock of the last applied batch (seconds)
	EventLagSecond prometheus.Histogram   // now - batch ts, seconds
}

// NewMetrics registers the kvevents metrics on reg.
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
		Batches:       cv("batches_total", "KV event batches applied.", "worker"),
		Events:        cv("events_total", "KV events applied to the prefix index.", "worker", "kind"),
		SkippedEvents: cv("events_skipped_total", "KV events skipped, by reason.", "worker", "reason"),
		UnknownEvents: cv("events_unknown_total", "KV events with an unknown tag.", "worker", "tag"),
		NonGPUMedium:  cv("events_non_gpu_medium_total", "KV events on a non-device medium.", "worker", "medium"),
		DroppedFrames: cv("messages_dropped_total", "ZeroMQ messages dropped, by reason.", "worker", "reason"),
		Gaps:          cv("gaps_total", "Sequence gaps detected.", "worker"),
		Replays:       cv("replays_total", "Replay attempts, by outcome.", "worker", "outcome"),
		HistoryLost:   cv("history_lost_total", "Streams cleared because the missed history could not be replayed.", "worker"),
		Restarts:      cv("publisher_restarts_total", "Publisher restarts detected (sequence went back).", "worker"),
		Reconnects:    cv("reconnects_total", "Transport reconnects to the worker's publisher.", "worker"),
		Clears:        cv("stream_clears_total", "Stream index clears, by reason.", "worker", "reason"),
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
