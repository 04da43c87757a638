package extproc

import (
	"github.com/condisagg/condisagg/route"
	"strconv"

	"github.com/condisagg/condisagg/policy"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the ext_proc counters and histograms (ARCHITECTURE §5, conditional-disagg.md
// §8.2). Every label comes from a closed set: policy kinds, routes, reasons, stages, HTTP
// status codes 400–599 (else "other"), rejection reasons.
type Metrics struct {
	Decisions        *prometheus.CounterVec   // policy, route, reason
	EffectiveISL     prometheus.Histogram     // eff tokens of policy decisions
	EffectiveRatio   prometheus.Histogram     // eff / ISL
	PromptTokens     *prometheus.HistogramVec // route
	DecisionSeconds  *prometheus.HistogramVec // stage: tokenize, overlap, decide, book, total
	BusyUnknown      *prometheus.CounterVec   // signal: prefill
	Rejected         *prometheus.CounterVec   // reason: invalid_body, body_too_large, no_eligible_worker, subset_no_match, internal
	InternalErrors   prometheus.Counter       // pipeline failures (before --failure-mode)
	DuplicateEOS     prometheus.Counter       // request body messages after the body was complete
	StreamedBodyMode prometheus.Counter       // completion requests in STREAMED mode (routed bodyless)
	StreamErrors     *prometheus.CounterVec   // reason: recv, send, protocol
	ActiveStreams    prometheus.Gauge         // open Process streams
	UpstreamErrors   *prometheus.CounterVec   // route, code
	Cancelled        prometheus.Counter       // streams that ended before their response did
	FirstTokenSecs   *prometheus.HistogramVec // route: decision to first token
	PrefillLegSecs   prometheus.Histogram     // the sidecar's prefill leg (X-Condisagg-Prefill-Ms)
	ShadowDecisions  *prometheus.CounterVec   // live_route, shadow_route, shadow_reason, same_workers
	UsageTokens      *prometheus.CounterVec   // route, kind: prompt, completion, cached
	// DisaggTransfers counts remote-prefill requests by whether the decode leg used the
	// transferred KV (docs/disagg-truth.md): prefill, decode (worker ids), outcome.
	DisaggTransfers *prometheus.CounterVec
	CachedError     prometheus.Histogram   // bypass: usage cached_tokens − router cached(d)
	SSEOverflow     prometheus.Counter     // streams whose SSE tail exceeded MaxSSETail
	ServedMismatch  prometheus.Counter     // gateway served another endpoint than the booked one
	SilentWorkers   *prometheus.GaugeVec   // pool: workers whose KV event stream is silent (§8.3)
	StrippedFields  *prometheus.CounterVec // field: client-sent body fields cut before routing (kv_transfer_params)
	UnknownModel    *prometheus.CounterVec // action: reject, passthrough (requests for a model no model serves)
	BufferedBytes   prometheus.Gauge       // bytes held by open streams (bodies being assembled, SSE tails, JSON copies)
	IdleTimeouts    prometheus.Counter     // streams ended by stream_idle_timeout
	DecisionWait    prometheus.Histogram   // seconds waited for a decision slot
	QueueTimeouts   prometheus.Counter     // decisions that found no slot within decision_queue_timeout
	ProtocolErrors  *prometheus.CounterVec // kind: repeated_request_headers
	// Abandoned counts decisions given up because the stream ended (the client went away)
	// while waiting for a slot or during tokenization: nothing booked, nothing answered.
	Abandoned prometheus.Counter
	// UnansweredReleases counts bookings released because their stream reached no response
	// phase within unanswered_booking_timeout.
	UnansweredReleases prometheus.Counter
	// LogsSuppressed counts per-request warnings dropped by the log throttle.
	LogsSuppressed prometheus.Counter
	// SessionAffinity counts the booked decisions of requests that named a session, by what
	// became of the session's binding (policy.Affinity: miss, hit, overridden_guard,
	// overridden_forecast, worker_gone).
	SessionAffinity *prometheus.CounterVec
	// SessionHeadersIgnored counts session header values not used (reason: oversized, invalid).
	SessionHeadersIgnored *prometheus.CounterVec

	stageSecs [route.NumStages + 1]prometheus.Observer // DecisionSeconds per stage, then "total"
}

// NewMetrics registers the ext_proc metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "condisagg_decisions_total",
			Help: "Routing decisions by policy, route and reason."}, []string{"policy", "route", "reason"}),
		EffectiveISL: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "condisagg_effective_isl_tokens",
			Help:    "Effective ISL (prompt tokens not cached on the previewed decode worker).",
			Buckets: prometheus.ExponentialBuckets(16, 2, 14)}),
		EffectiveRatio: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "condisagg_effective_isl_ratio",
			Help: "Effective ISL divided by ISL.", Buckets: prometheus.LinearBuckets(0, 0.1, 11)}),
		PromptTokens: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "condisagg_prompt_tokens",
			Help: "Prompt tokens (ISL) of routed requests.", Buckets: prometheus.ExponentialBuckets(16, 2, 14)},
			[]string{"route"}),
		DecisionSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "condisagg_decision_seconds",
			Help: "Decision latency by stage.", Buckets: prometheus.ExponentialBuckets(1e-5, 2, 16)},
			[]string{"stage"}),
		BusyUnknown: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "condisagg_busy_signal_unknown_total",
			Help: "Decisions whose busy signal was unknown."}, []string{"signal"}),
		Rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "condisagg_requests_rejected_total",
			Help: "Requests answered with an immediate error response, by reason."}, []string{"reason"}),
		InternalErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "condisagg_internal_errors_total",
			Help: "Routing pipeline failures handled by --failure-mode."}),
		DuplicateEOS: prometheus.NewCounter(prometheus.CounterOpts{Name: "condisagg_extproc_duplicate_eos_total",
			Help: "Request body messages received after the body was complete (ignored)."}),
		StreamedBodyMode: prometheus.NewCounter(prometheus.CounterOpts{Name: "condisagg_extproc_streamed_body_mode_total",
			Help: "Completion requests in a request body mode that cannot carry a decision (STREAMED, BUFFERED_PARTIAL, NONE), routed without one."}),
		StreamErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "condisagg_extproc_stream_errors_total",
			Help: "ext_proc streams that failed, by reason."}, []string{"reason"}),
		ActiveStreams: prometheus.NewGauge(prometheus.GaugeOpts{Name: "condisagg_extproc_active_streams",
			Help: "Open ext_proc streams."}),
		UpstreamErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "condisagg_upstream_errors_total",
			Help: "Upstream error answers by route and HTTP status."}, []string{"route", "code"}),
		Cancelled: prometheus.NewCounter(prometheus.CounterOpts{Name: "condisagg_requests_cancelled_total",
			Help: "Requests whose stream ended before the response did (bookings released)."}),
		FirstTokenSecs: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "condisagg_time_to_first_token_seconds",
			Help: "Time from the decision to the first token event.", Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)},
			[]string{"route"}),
		PrefillLegSecs: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "condisagg_prefill_leg_seconds",
			Help:    "Remote path: the prefill leg's duration as the sidecar reports it on the response; the prefill booking ends then.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)}),
		ShadowDecisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "condisagg_shadow_decisions_total",
			Help: "Requests the candidate config (router.shadow_disagg_config) decided beside the live one, by both routes, the candidate's reason and whether it chose the same workers."},
			[]string{"live_route", "shadow_route", "shadow_reason", "same_workers"}),
		UsageTokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "condisagg_usage_tokens_total",
			Help: "Tokens reported in answer usage, by route and kind."}, []string{"route", "kind"}),
		DisaggTransfers: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "condisagg_disagg_transfers_total",
			Help: "Remote-prefill requests by prefill/decode pair and whether the decode leg's usage shows the transferred KV was used (transferred), the prompt was computed again (recomputed) or neither is known (unknown)."},
			[]string{"prefill", "decode", "outcome"}),
		CachedError: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "condisagg_cached_tokens_error",
			Help:    "Bypass requests: reported cached_tokens minus the router's cached(d).",
			Buckets: []float64{-4096, -1024, -256, -64, -16, 0, 16, 64, 256, 1024, 4096}}),
		SSEOverflow: prometheus.NewCounter(prometheus.CounterOpts{Name: "condisagg_sse_parse_overflow_total",
			Help: "Response streams whose incomplete SSE event exceeded the parse buffer."}),
		ServedMismatch: prometheus.NewCounter(prometheus.CounterOpts{Name: "condisagg_served_endpoint_mismatch_total",
			Help: "Responses served by another endpoint than the booked one (booking released)."}),
		SilentWorkers: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "condisagg_kv_events_silent_workers",
			Help: "Workers whose KV event stream is down or silent (conditional-disagg.md §8.3)."}, []string{"pool"}),
		StrippedFields: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "condisagg_request_fields_stripped_total",
			Help: "Client-sent request body fields removed before the request went upstream (only pd-sidecar may set them)."}, []string{"field"}),
		UnknownModel: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "condisagg_unknown_model_requests_total",
			Help: "Requests whose model names no served model or adapter, by what unknown_model did with them (reject: 404, passthrough: routed by load)."},
			[]string{"action"}),
		BufferedBytes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "condisagg_extproc_buffered_bytes",
			Help: "Bytes held by open ext_proc streams: request bodies being assembled, SSE tails, copies of non-streaming answers."}),
		IdleTimeouts: prometheus.NewCounter(prometheus.CounterOpts{Name: "condisagg_extproc_stream_idle_timeouts_total",
			Help: "ext_proc streams ended because their request stalled for stream_idle_timeout."}),
		DecisionWait: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "condisagg_extproc_decision_wait_seconds",
			Help:    "Time a decision waited for a decision slot (decision_concurrency).",
			Buckets: prometheus.ExponentialBuckets(1e-4, 2, 16)}),
		QueueTimeouts: prometheus.NewCounter(prometheus.CounterOpts{Name: "condisagg_extproc_decision_queue_timeouts_total",
			Help: "Requests routed by --failure-mode because no decision slot was free within decision_queue_timeout."}),
		ProtocolErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "condisagg_extproc_protocol_errors_total",
			Help: "ext_proc messages out of protocol order (ignored), by kind."}, []string{"kind"}),
	}
	reg.MustRegister(m.BufferedBytes, m.IdleTimeouts, m.DecisionWait, m.QueueTimeouts, m.ProtocolErrors, m.StrippedFields, m.Decisions, m.EffectiveISL, m.EffectiveRatio, m.PromptTokens, m.DecisionSeconds,
		m.BusyUnknown, m.Rejected, m.InternalErrors, m.DuplicateEOS, m.StreamedBodyMode, m.StreamErrors,
		m.ActiveStreams, m.UpstreamErrors, m.Cancelled, m.FirstTokenSecs, m.PrefillLegSecs, m.ShadowDecisions, m.UsageTokens, m.DisaggTransfers, m.CachedError, m.SSEOverflow,
		m.ServedMismatch, m.SilentWorkers, m.UnknownModel)
	m.Abandoned = prometheus.NewCounter(prometheus.CounterOpts{Name: "condisagg_extproc_abandoned_decisions_total",
		Help: "Decisions given up because the client went away while they waited for a slot or tokenized (nothing booked)."})
	m.UnansweredReleases = prometheus.NewCounter(prometheus.CounterOpts{Name: "condisagg_extproc_unanswered_booking_releases_total",
		Help: "Bookings released because their stream saw no response within unanswered_booking_timeout."})
	m.LogsSuppressed = prometheus.NewCounter(prometheus.CounterOpts{Name: "condisagg_extproc_logs_suppressed_total",
		Help: "Per-request warnings not logged because of the log rate limit."})
	reg.MustRegister(m.Abandoned, m.UnansweredReleases, m.LogsSuppressed)
	m.SessionAffinity = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "condisagg_session_affinity_total",
		Help: "Booked decisions of requests with a session id, by what became of the session's binding."}, []string{"outcome"})
	m.SessionHeadersIgnored = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "condisagg_session_headers_ignored_total",
		Help: "Session header values ignored (oversized: over 256 bytes; invalid: not visible ASCII)."}, []string{"reason"})
	reg.MustRegister(m.SessionAffinity, m.SessionHeadersIgnored)
	for _, a := range policy.Affinities() {
		m.SessionAffinity.WithLabelValues(a.String())
	}
	for _, r := range []string{"oversized", "invalid"} {
		m.SessionHeadersIgnored.WithLabelValues(r)
	}
	for i, name := range route.StageNames {
		m.stageSecs[i] = m.DecisionSeconds.WithLabelValues(name)
	}
	m.stageSecs[route.NumStages] = m.DecisionSeconds.WithLabelValues("total")
	return m
}

// decided records one routed request.
func (m *Metrics) decided(pol policy.Kind, out *route.Outcome) {
	rt := out.Route.String()
	m.Decisions.WithLabelValues(string(pol), rt, out.Reason).Inc()
	if sh := out.Shadow; sh != nil {
		m.ShadowDecisions.WithLabelValues(rt, sh.Route.String(), sh.Reason.String(), strconv.FormatBool(sh.SameWorkers)).Inc()
	}
	if out.UnknownModel {
		m.UnknownModel.WithLabelValues("passthrough").Inc()
	}
	if out.Session.ID != "" && out.BookingID != "" {
		m.SessionAffinity.WithLabelValues(out.Session.Outcome.String()).Inc()
	}
	if out.IsFallback() {
		return
	}
	in := &out.Decision.Inputs
	m.PromptTokens.WithLabelValues(rt).Observe(float64(out.Tokens))
	if in.PreviewDecode != "" {
		m.EffectiveISL.Observe(float64(in.Eff))
		m.EffectiveRatio.Observe(in.Ratio)
	}
	if in.PrefillBusy == policy.BusyUnknown {
		m.BusyUnknown.WithLabelValues("prefill").Inc()
	}
	var total float64
	for i, d := range out.Stages {
		s := d.Seconds()
		total += s
		m.stageSecs[i].Observe(s)
	}
	m.stageSecs[route.NumStages].Observe(total)
}

// statusLabel bounds an HTTP status to a label.
func statusLabel(code int) string {
	if code >= 400 && code <= 599 {
		return strconv.Itoa(code)
	}
	return "other"
}
