package kvevents

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the counters of applying batches to the index. Build them with NewMetrics on an
// injected registry (never the global one); a nil *Metrics is not allowed, tests make their own
// registry. A transport shell adds its own counters next to these and writes DroppedFrames and
// Clears with its own reasons, so each metric name is registered once.
//
// Label cardinality is bounded: `worker` comes from the configured worker list, `reason`,
// `medium` and `tag` from closed sets (unknown values are folded into "other").
type Metrics struct {
	Batches       *prometheus.CounterVec // worker: batches applied
	Events        *prometheus.CounterVec // worker, kind: events applied to the index
	SkippedEvents *prometheus.CounterVec // worker, reason: events skipped (malformed_event, parent_not_found, ...)
	UnknownEvents *prometheus.CounterVec // worker, tag: events with an unknown tag
	NonGPUMedium  *prometheus.CounterVec // worker, medium: events on a non-device medium
	// DroppedFrames: worker, reason: messages dropped whole. The Applier writes decode_error and
	// rank_mismatch; the transport shell writes the DropReason values.
	DroppedFrames *prometheus.CounterVec
	// Clears: worker, reason: stream index cleared. The Applier writes capacity; the transport
	// shell writes the ClearReason values.
	Clears *prometheus.CounterVec
	// BlockSizeMismatch: worker: the block_size of the worker's KV events while it differs from
	// the router's (its stores are refused, so it gets no cache credit); 0 when they agree.
	BlockSizeMismatch *prometheus.GaugeVec
}

// NewMetrics registers the apply metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	cv := func(name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "condisagg_kv_" + name, Help: help}, labels)
		reg.MustRegister(c)
		return c
	}
	mismatch := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "condisagg_kv_events_block_size_mismatch",
		Help: "Block size of a worker's KV events when it differs from the router's --block-size (no cache credit); 0 when they agree."},
		[]string{"worker"})
	reg.MustRegister(mismatch)
	return &Metrics{
		BlockSizeMismatch: mismatch,
		Batches:           cv("batches_total", "KV event batches applied.", "worker"),
		Events:            cv("events_total", "KV events applied to the prefix index.", "worker", "kind"),
		SkippedEvents:     cv("events_skipped_total", "KV events skipped, by reason.", "worker", "reason"),
		UnknownEvents:     cv("events_unknown_total", "KV events with an unknown tag.", "worker", "tag"),
		NonGPUMedium:      cv("events_non_gpu_medium_total", "KV events on a non-device medium.", "worker", "medium"),
		DroppedFrames:     cv("messages_dropped_total", "ZeroMQ messages dropped, by reason.", "worker", "reason"),
		Clears:            cv("stream_clears_total", "Stream index clears, by reason.", "worker", "reason"),
	}
}
