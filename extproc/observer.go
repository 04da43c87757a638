package extproc

import (
	"bytes"
	"net/http"
	"strings"
	"time"

	"github.com/condisagg/condisagg/policy"
	"github.com/condisagg/condisagg/route"
)

// respObserver follows the response of a booked request and reports what it sees to the
// request's route.Ticket, which releases the bookings (conditional-disagg.md §5.2,
// envoy-extproc.md §3) and feeds the slo controller: the prefill leg's end when the sidecar
// reports it (x-condisagg-prefill-ms on the response headers), the first token (non-streaming:
// the response headers), the finished answer, or its failure (an upstream error, a stream that
// ends first).
type respObserver struct {
	ticket    *route.Ticket // nil = nothing booked, nothing to follow
	dest      string        // the destination Envoy was told to use
	destID    string        // the worker behind dest, whose health the response informs
	classify  bool          // a 5xx from Envoy itself or the worker: the first body chunk tells which
	route     policy.Route
	bypass    bool
	cached    int // router's cached(d), for the bypass usage error
	streaming bool
	sse       sseParser
	json      []byte // copy of a non-streaming answer, up to MaxJSONResponse
	jsonOver  bool
	ended     bool // the response ended (end_of_stream, trailers, error)
	// freedEarly: unanswered_booking_timeout released the booking before any response; the
	// answer is still observed (latency, usage, transfer truth), and releasing again is a no-op.
	freedEarly   bool
	tokenEvents  int   // token events of a streamed answer
	outputTokens int64 // usage.completion_tokens when the answer reported it
	// A remote-prefill request's pair, whose decode leg's usage is classified once
	// (docs/disagg-truth.md); judged when done or not wanted.
	prefillID, decodeID string
	answered            bool // 2xx response headers
	judged              bool
	classified          bool  // judgeTransfer ran
	usage               Usage // the last usage seen (with continuous_usage_stats every chunk has one)
	hasUsage            bool
	kvTransfer          string // the sidecar's report (responseHead.kvTransfer)
	prefillCached       int64  // the prefill worker's hit as the sidecar reported it; -1: none
}

func (o *respObserver) start(out *route.Outcome) {
	*o = respObserver{ticket: out.Ticket, dest: out.Destination().Endpoint, destID: out.Destination().ID, route: out.Route,
		bypass: out.Route == policy.RouteDecode, cached: out.Decision.Inputs.Cached,
		judged: !twoLegs(out.Route) || out.Prefill.ID == "" || out.Decode.ID == "", prefillCached: -1}
	if !o.judged {
		o.prefillID, o.decodeID = out.Prefill.ID, out.Decode.ID
	}
}

// twoLegs reports whether route r runs a prefill leg before the decode leg through the
// sidecar: the remote prefill, and the handoff (whose prefill leg runs on a decode worker).
func twoLegs(r policy.Route) bool { return r == policy.RoutePrefill || r == policy.RouteHandoff }

// following reports whether the answer is still followed: a booked request whose ticket has
// not ended.
func (o *respObserver) following() bool { return !o.ticket.Ended() }

// served checks the endpoint the gateway reports it used (envoy-extproc.md §2): another one
// means the gateway retried elsewhere on its own, so the booking is wrong and is released.
func (o *respObserver) served(x *exchange, endpoint string) {
	if endpoint == "" || !o.following() {
		return
	}
	if first, _, _ := strings.Cut(endpoint, ","); strings.TrimSpace(first) == o.dest {
		return
	}
	x.srv.metrics.ServedMismatch.Inc()
	o.fail(x)
}

// headerPrefillMs is the sidecar's response header on a request that ran a prefill leg: its
// duration in milliseconds (pd-sidecar sets it once the leg is over).
const headerPrefillMs = "x-condisagg-prefill-ms"

// headerKVTransfer and headerPrefillCachedTokens are pd-sidecar's report on a remote request:
// what became of the prefill leg's KV, and the prefill worker's own prefix-cache hit
// (docs/disagg-truth.md §3).
const (
	headerKVTransfer          = "x-condisagg-kv-transfer"
	headerPrefillCachedTokens = "x-condisagg-prefill-cached-tokens"
)

// responseHead is what the response headers say.
type responseHead struct {
	code        int
	contentType string
	prefillMs   int64 // -1: no prefill leg reported
	// kvTransfer and prefillCached are pd-sidecar's report (headerKVTransfer, "" when absent;
	// headerPrefillCachedTokens, -1 when absent).
	kvTransfer    string
	prefillCached int64
}

// headers observes the response status and content type. On the remote path a reported
// prefill leg ends the prefill entry now: the prefill worker is done, and holding its load
// until the decode worker's first token would make a congested decode pool look like a busy
// prefill pool (conditional-disagg.md §5.2).
func (o *respObserver) headers(x *exchange, rh responseHead, eos bool) {
	code, contentType := rh.code, rh.contentType
	o.health(x, code, contentType, eos)
	if rh.prefillMs >= 0 && twoLegs(o.route) {
		x.srv.metrics.PrefillLegSecs.Observe(float64(rh.prefillMs) / 1000)
		o.ticket.PrefillDone()
	}
	if twoLegs(o.route) && rh.kvTransfer != "" {
		o.kvTransfer, o.prefillCached = rh.kvTransfer, rh.prefillCached
	}
	if !o.following() {
		return
	}
	if code >= 400 {
		x.srv.metrics.UpstreamErrors.WithLabelValues(o.route.String(), statusLabel(code)).Inc()
		o.fail(x)
		return
	}
	o.answered = code >= 200 && code < 300
	o.streaming = strings.HasPrefix(strings.ToLower(strings.TrimSpace(contentType)), "text/event-stream")
	if !o.streaming && code >= 200 && code < 300 {
		o.firstToken(x) // vLLM sends non-streaming headers once the answer is complete
	}
	if eos {
		o.fail(x) // headers only: no answer to finish
	}
}

// health reports the response to the destination worker's health. A worker's own answers
// carry JSON; a 5xx in plain text is Envoy's local reply, which the first body chunk explains:
// "upstream connect error" means the worker could not be reached, anything else (a circuit
// breaker overflow, say) is not the worker's doing.
func (o *respObserver) health(x *exchange, code int, contentType string, eos bool) {
	if o.destID == "" || code == 0 {
		return
	}
	if code < 500 || strings.Contains(strings.ToLower(contentType), "json") || strings.Contains(contentType, "event-stream") {
		x.srv.router.ReportUpstream(o.destID, code, false)
		return
	}
	o.classify = !eos
}

// classifyLocalReply reads the first chunk of a plain-text 5xx (see health).
func (o *respObserver) classifyLocalReply(x *exchange, chunk []byte) {
	o.classify = false
	switch {
	case bytes.Contains(chunk, []byte("overflow")):
	case bytes.Contains(chunk, []byte("upstream connect error")):
		x.srv.router.ReportUpstream(o.destID, 0, true)
	default:
		x.srv.router.ReportUpstream(o.destID, http.StatusInternalServerError, false)
	}
}

// body observes one response chunk; it never changes or delays it.
func (o *respObserver) body(x *exchange, chunk []byte, eos bool) {
	if o.classify && len(chunk) > 0 {
		o.classifyLocalReply(x, chunk)
	}
	if !o.following() {
		return
	}
	if o.streaming {
		obs := o.sse.Feed(chunk)
		o.observed(x, &obs)
	} else if !o.jsonOver {
		if len(o.json)+len(chunk) > MaxJSONResponse {
			o.json, o.jsonOver = nil, true
		} else {
			o.json = append(o.json, chunk...)
		}
	}
	if eos {
		if !o.streaming && !o.jsonOver {
			obs := parseJSONResponse(o.json)
			o.observed(x, &obs)
			if obs.HasUsage && !obs.Done {
				o.complete(x)
			}
		}
		o.fail(x) // no-op after complete: the answer ended unfinished
	}
}

// observed applies what the parser saw.
func (o *respObserver) observed(x *exchange, obs *observation) {
	m := x.srv.metrics
	if obs.Overflow {
		m.SSEOverflow.Inc()
	}
	if obs.FirstToken && o.streaming {
		o.firstToken(x)
	}
	o.tokenEvents += obs.TokenEvents
	if obs.HasUsage {
		o.outputTokens = obs.Usage.CompletionTokens
		rt := o.route.String()
		m.UsageTokens.WithLabelValues(rt, "prompt").Add(float64(obs.Usage.PromptTokens))
		m.UsageTokens.WithLabelValues(rt, "completion").Add(float64(obs.Usage.CompletionTokens))
		o.usage, o.hasUsage = obs.Usage, true
		if obs.Usage.CachedTokens >= 0 {
			m.UsageTokens.WithLabelValues(rt, "cached").Add(float64(obs.Usage.CachedTokens))
			if o.bypass {
				m.CachedError.Observe(float64(obs.Usage.CachedTokens - int64(o.cached)))
			}
		}
	}
	if obs.Error {
		o.answerFailed() // a failed answer says nothing about the transfer
		m.UpstreamErrors.WithLabelValues(o.route.String(), "stream_error").Inc()
		o.fail(x)
	}
	if obs.Done {
		o.complete(x)
	}
}

// complete reports the finished answer with its output length: the usage's completion
// tokens, else the token events.
func (o *respObserver) complete(x *exchange) {
	n := int(o.outputTokens)
	if n <= 0 {
		n = o.tokenEvents
	}
	o.ticket.Finish(x.srv.now(), n)
	o.end(x)
}

func (o *respObserver) firstToken(x *exchange) {
	if ttft, first := o.ticket.FirstToken(x.srv.now(), o.streaming); first {
		x.srv.metrics.FirstTokenSecs.WithLabelValues(o.route.String()).Observe(ttft.Seconds())
	}
}

// judgeTransfer classifies a remote-prefill request's decode leg once, by the last usage of
// its answer, and counts it per prefill/decode pair.
func (o *respObserver) judgeTransfer(x *exchange) {
	o.judged, o.classified = true, true
	rec := TransferRecord{At: time.Now(), Decision: x.seq, RequestID: x.requestID, Prefill: o.prefillID, Decode: o.decodeID,
		CachedTokens: -1, PrefillCachedTokens: o.prefillCached, Sidecar: o.kvTransfer}
	if o.hasUsage {
		rec.PromptTokens, rec.CachedTokens = o.usage.PromptTokens, o.usage.CachedTokens
	}
	out := x.srv.transfers.classify(rec, o.hasUsage)
	x.srv.metrics.DisaggTransfers.WithLabelValues(o.prefillID, o.decodeID, string(out)).Inc()
}

// answerFailed: the answer ended in an error or never ended, which says nothing about the
// transfer, unless the sidecar already said the KV load failed.
func (o *respObserver) answerFailed() {
	if o.kvTransfer != sidecarFailed {
		o.judged = true
	}
}

// fail ends an answer that did not complete (an upstream error, a cut stream, a gateway that
// served elsewhere): the ticket releases everything it still holds and learns nothing.
// Idempotent, and a no-op after complete.
func (o *respObserver) fail(x *exchange) {
	o.ticket.Cancel()
	o.end(x)
}

// end marks the response over. A successful remote-prefill answer is classified here, when its
// last usage has been seen; a failed KV load whatever the answer of the sidecar's local retry.
func (o *respObserver) end(x *exchange) {
	if (o.answered || o.kvTransfer == sidecarFailed) && !o.judged {
		o.judgeTransfer(x)
	}
	o.ended = true
}

// cancel runs when the stream ends: a ticket still open means the response never ended.
func (o *respObserver) cancel(x *exchange) {
	if !o.following() {
		return
	}
	x.srv.metrics.Cancelled.Inc()
	o.answerFailed() // the answer never ended
	o.fail(x)
}
