package sidecar

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the sidecar's counters, gauges and histograms, all named condisagg_sidecar_*.
// Build them with NewMetrics on an injected registry.
type Metrics struct {
	Requests        *prometheus.CounterVec // mode (remote, fallback, kv_load_retry, passthrough, prefill_error, rejected), code
	Rejected        *prometheus.CounterVec // reason: requests refused by the sidecar itself
	Fallbacks       *prometheus.CounterVec // reason: prefill failures served by local prefill at D
	Retries         *prometheus.CounterVec // leg: retried attempts
	UpstreamErrors  *prometheus.CounterVec // leg, reason: failed attempts (connect, timeout, transport, status, bad_response)
	PrefillSeconds  prometheus.Histogram   // the whole prefill leg, retries included
	FirstByte       prometheus.Histogram   // decode leg: request sent to response headers
	InFlight        prometheus.Gauge       // requests being served
	ClientCancels   prometheus.Counter     // client went away before the answer ended
	StreamAborts    prometheus.Counter     // D failed after its headers went to the client
	UsageRewrites   *prometheus.CounterVec // outcome: rewritten, unchanged, line_too_long, body_too_large
	AllowlistHosts  prometheus.Gauge       // host:port pairs currently allowed
	ResolveFailures prometheus.Counter     // failed allowlist DNS re-resolutions
	KVParamsRemoved prometheus.Counter     // client-sent kv_transfer_params removed on the passthrough path
	KVLoadFailures  prometheus.Counter     // decode legs that could not load P's KV (then prefilled locally at D)
}

// NewMetrics registers the sidecar metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	cv := func(name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "condisagg_sidecar_" + name, Help: help}, labels)
		reg.MustRegister(c)
		return c
	}
	c := func(name, help string) prometheus.Counter {
		x := prometheus.NewCounter(prometheus.CounterOpts{Name: "condisagg_sidecar_" + name, Help: help})
		reg.MustRegister(x)
		return x
	}
	g := func(name, help string) prometheus.Gauge {
		x := prometheus.NewGauge(prometheus.GaugeOpts{Name: "condisagg_sidecar_" + name, Help: help})
		reg.MustRegister(x)
		return x
	}
	h := func(name, help string) prometheus.Histogram {
		x := prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "condisagg_sidecar_" + name, Help: help,
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 14), // 1 ms .. ~150 s
		})
		reg.MustRegister(x)
		return x
	}
	return &Metrics{
		Requests:        cv("requests_total", "Requests by path taken and final HTTP status sent to the client.", "mode", "code"),
		Rejected:        cv("rejected_total", "Requests refused by the sidecar (403, 400, 413) by reason.", "reason"),
		Fallbacks:       cv("prefill_fallbacks_total", "Prefill failures answered by local prefill at the decode worker, by reason.", "reason"),
		Retries:         cv("upstream_retries_total", "Retried upstream attempts by leg.", "leg"),
		UpstreamErrors:  cv("upstream_errors_total", "Failed upstream attempts by leg and reason.", "leg", "reason"),
		PrefillSeconds:  h("prefill_duration_seconds", "Duration of the prefill leg, retries included."),
		FirstByte:       h("decode_first_byte_seconds", "Decode leg: time from sending the request to D's response headers."),
		InFlight:        g("in_flight_requests", "Requests being served."),
		ClientCancels:   c("client_cancels_total", "Requests whose client went away before the answer ended."),
		StreamAborts:    c("stream_aborts_total", "Answers cut because the decode worker failed after its headers were sent."),
		UsageRewrites:   cv("usage_rewrites_total", "Usage rewrite outcomes (cached_tokens from the prefill worker).", "outcome"),
		AllowlistHosts:  g("allowlist_hosts", "host:port pairs currently allowed."),
		ResolveFailures: c("allowlist_resolve_failures_total", "Failed DNS re-resolutions of allowlist names."),
		KVParamsRemoved: c("client_kv_transfer_params_removed_total", "Client-sent kv_transfer_params removed before the request reached a worker."),
		KVLoadFailures:  c("kv_load_failures_total", "Decode legs that failed to load the prefill worker's KV (an error before the first token) and were sent to the decode worker again as a local prefill."),
	}
}
