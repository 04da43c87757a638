package extproc

import (
	"context"
	"errors"
	"fmt"
	"github.com/condisagg/condisagg/route"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/condisagg/condisagg/policy"
)

type resps = []*extprocv3.ProcessingResponse

// reqState is where the request direction is.
type reqState uint8

const (
	reqHeaders  reqState = iota // waiting for request headers
	reqCollect                  // assembling a completion body for the decision
	reqEcho                     // routed already; body chunks pass through
	reqComplete                 // body complete (decided or rejected); later body messages are duplicates
)

// exchange is the state machine of one ext_proc stream: Step takes one ProcessingRequest and
// returns the responses to send. It is owned by the goroutine running Process.
type exchange struct {
	srv      *Server
	set      *Settings
	reqMode  filterv3.ProcessingMode_BodySendMode
	respMode filterv3.ProcessingMode_BodySendMode
	modesSet bool

	state     reqState
	done      bool // an immediate response was sent: ignore everything, wait for EOF
	ep        route.Endpoint
	requestID string    // x-request-id, for logs (clipped: logthrottle.go)
	started   time.Time // the stream's start, for stream_request_timeout
	// sawResponse: response headers arrived (the booking's unanswered bound stops).
	sawResponse bool
	client      slotKey // whom the decision slot is counted against (fairslots.go)
	seq         uint64  // the decision's decisionlog.Entry.Seq in the server's Recent (0: none kept)
	strip       []string
	slo         policy.SLO // x-slo-ttft-ms, x-slo-tpot-ms
	session     string     // the session header's value ("" : none)
	sessionRank int        // the position in Settings.SessionHeaders of the header session came from
	sloErr      error      // an unreadable objective header: the request gets 400
	subset      []string
	hasSubset   bool
	body        []byte
	// clean cuts engine-control members from a body whose route was fixed before it arrived
	// (STREAMED, full-duplex passthrough); nil when the body is collected whole.
	clean *route.StreamCleaner

	out       route.Outcome
	routed    bool
	decidedAt time.Time

	resp respObserver
	held int // bytes counted in condisagg_extproc_buffered_bytes (account)
	// answeredHeaders is when the BUFFERED request headers were answered (zero otherwise).
	answeredHeaders time.Time

	single [1]*extprocv3.ProcessingResponse // backing array of one-response answers
}

// one returns r as the step's only response without allocating a slice; the slice is valid
// until the next Step.
func (x *exchange) one(r *extprocv3.ProcessingResponse) resps {
	x.single[0] = r
	return x.single[:]
}

func newExchange(s *Server) *exchange {
	return &exchange{srv: s, set: s.Settings(), started: time.Now()}
}

// Step advances the machine by one message. A switch over message kinds with one handler
// per kind.
func (x *exchange) Step(ctx context.Context, req *extprocv3.ProcessingRequest) resps {
	if !x.modesSet && req.GetProtocolConfig() != nil {
		x.reqMode, x.respMode = req.ProtocolConfig.RequestBodyMode, req.ProtocolConfig.ResponseBodyMode
		x.modesSet = true
	}
	if x.done {
		return nil
	}
	switch m := req.Request.(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		return x.requestHeaders(ctx, req, m.RequestHeaders)
	case *extprocv3.ProcessingRequest_RequestBody:
		return x.requestBody(ctx, m.RequestBody)
	case *extprocv3.ProcessingRequest_RequestTrailers:
		return x.requestTrailers(ctx)
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return x.responseHeaders(req, m.ResponseHeaders)
	case *extprocv3.ProcessingRequest_ResponseBody:
		return x.responseBody(m.ResponseBody)
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		return x.responseTrailers()
	}
	return nil
}

func (x *exchange) fullDuplex() bool {
	return x.reqMode == filterv3.ProcessingMode_FULL_DUPLEX_STREAMED
}

// requestHeaders strips the client's router headers and either routes at once (bodyless,
// passthrough paths, STREAMED) or waits for the body.
func (x *exchange) requestHeaders(ctx context.Context, req *extprocv3.ProcessingRequest, h *extprocv3.HttpHeaders) resps {
	if x.state != reqHeaders {
		// One stream carries one request: a second request_headers gets no answer and never
		// a second decision, so a stream holds at most one booking.
		x.srv.metrics.ProtocolErrors.WithLabelValues("repeated_request_headers").Inc()
		return nil
	}
	method := x.readHeaders(h.GetHeaders())
	if addr := sourceAddress(req); addr != "" {
		x.client = slotKey{id: addr, capped: true}
	}
	x.subset, x.hasSubset = subsetHint(req.GetMetadataContext())
	if method != "" && method != "POST" {
		x.ep = route.EndpointOther
	}
	if !x.modesSet {
		x.reqMode = filterv3.ProcessingMode_BUFFERED // no protocol_config: assume the recommended profile
	}
	noBodyDecision := x.reqMode != filterv3.ProcessingMode_BUFFERED && !x.fullDuplex()
	if h.GetEndOfStream() || x.ep == route.EndpointOther || noBodyDecision {
		if x.ep != route.EndpointOther && !h.GetEndOfStream() {
			x.bodyModeMisconfig()
		}
		x.state = reqEcho
		if h.GetEndOfStream() {
			x.state = reqComplete
		}
		out, err := x.srv.router.Fallback(ctx, &route.Request{Subset: x.subset, HasSubset: x.hasSubset}, policy.ReasonPassthrough)
		if err != nil {
			return x.reject(err)
		}
		resp := x.routedResponse(phaseRequestHeaders, &out, nil)
		if x.state == reqEcho && x.reqMode != filterv3.ProcessingMode_BUFFERED {
			// The body follows a fixed route: it is cleaned chunk by chunk, so its length changes.
			x.clean = &route.StreamCleaner{}
			removeContentLength(resp)
		}
		return x.one(resp)
	}
	x.state = reqCollect
	if x.fullDuplex() {
		return nil // deferred until the body is complete
	}
	// BUFFERED: Envoy sends the body, and starts its message_timeout for it, only once it has
	// this answer; the decision's queue deadline counts from here.
	x.answeredHeaders = time.Now()
	if len(x.strip) == len(stripHeaders) {
		return x.one(x.srv.fixed.strip) // the client sent no other x-condisagg-* header
	}
	return x.one(stripResponse(x.strip))
}

// readHeaders records the request's path, id and the router headers to strip; it returns
// the method.
func (x *exchange) readHeaders(hm *corev3.HeaderMap) (method string) {
	// The contract's list itself, full to capacity: an extra header appends to a copy.
	x.strip = stripHeaders[:len(stripHeaders):len(stripHeaders)]
	for _, hv := range hm.GetHeaders() {
		key := strings.ToLower(hv.GetKey())
		switch key {
		case ":path":
			x.ep = route.ParseEndpoint(headerValue(hv))
		case ":method":
			method = headerValue(hv)
		case "x-request-id":
			x.requestID = clip(headerValue(hv))
		case HeaderSLOTTFT, HeaderSLOTPOT:
			d, err := policy.ParseMillis(headerValue(hv))
			if err != nil {
				x.sloErr = fmt.Errorf("%w: header %s: %w", route.ErrInvalidBody, key, err)
			} else if key == HeaderSLOTTFT {
				x.slo.TTFT = d
			} else {
				x.slo.TPOT = d
			}
		default:
			if strings.HasPrefix(key, "x-condisagg-") && !contains(x.strip, key) {
				x.strip = append(x.strip, key)
			} else if len(x.set.SessionHeaders) > 0 {
				x.readSession(key, hv)
			}
		}
	}
	return method
}

// readSession takes the value of key if it is a session header of higher precedence than
// the one read so far. A value the router would not keep (over route.MaxSessionIDBytes, or
// holding anything but visible ASCII) is ignored and counted: the session is a hint, and a
// bad one must not cost the request its answer.
func (x *exchange) readSession(key string, hv *corev3.HeaderValue) {
	rank := -1
	for i, h := range x.set.SessionHeaders {
		if h == key {
			rank = i
			break
		}
	}
	if rank < 0 || (x.session != "" && rank >= x.sessionRank) {
		return
	}
	v, reason := sessionValue(hv)
	if reason != "" {
		x.srv.metrics.SessionHeadersIgnored.WithLabelValues(reason).Inc()
		return
	}
	if v != "" {
		x.session, x.sessionRank = v, rank
	}
}

// sessionValue is a session header's value, or why it is ignored ("oversized", "invalid").
func sessionValue(hv *corev3.HeaderValue) (string, string) {
	n := len(hv.GetValue())
	if n == 0 {
		n = len(hv.GetRawValue())
	}
	if n > route.MaxSessionIDBytes {
		return "", "oversized"
	}
	v := headerValue(hv)
	for i := 0; i < len(v); i++ {
		if v[i] < 0x21 || v[i] > 0x7e {
			return "", "invalid"
		}
	}
	return v, ""
}

// requestBody assembles a completion body, or echoes a routed one.
func (x *exchange) requestBody(ctx context.Context, b *extprocv3.HttpBody) resps {
	switch x.state {
	case reqComplete:
		x.srv.metrics.DuplicateEOS.Inc()
		return nil
	case reqEcho:
		if b.GetEndOfStream() {
			x.state = reqComplete
		}
		return x.echoBody(b.GetBody(), b.GetEndOfStream())
	case reqCollect:
	default:
		return nil
	}
	if len(x.body)+len(b.GetBody()) > x.set.MaxBodyBytes {
		x.state = reqComplete
		n := len(x.body) + len(b.GetBody())
		x.body = nil
		return x.reject(bodyTooLarge(n, x.set.MaxBodyBytes))
	}
	if !x.reserveBody(b.GetBody()) {
		x.state = reqComplete
		x.body = nil
		return x.reject(errBufferFull(len(b.GetBody()), x.set.maxBuffered()))
	}
	if x.body == nil {
		x.body = b.GetBody() // received messages are not reused: the first chunk needs no copy
	} else {
		x.body = appendBounded(x.body, b.GetBody(), x.set.MaxBodyBytes)
	}
	if x.fullDuplex() && !b.GetEndOfStream() {
		return nil
	}
	// BUFFERED: the one body message is the whole body, even when trailers follow.
	x.state = reqComplete
	return x.decide(ctx, b.GetEndOfStream())
}

// requestTrailers end a full-duplex body that had no end_of_stream chunk.
func (x *exchange) requestTrailers(ctx context.Context) resps {
	if x.state == reqCollect && x.fullDuplex() {
		x.state = reqComplete
		out := x.decide(ctx, false)
		if x.done {
			return out
		}
		return append(out, x.srv.fixed.cont[phaseRequestTrailers])
	}
	if x.state == reqEcho {
		x.state = reqComplete
	}
	return x.one(x.srv.fixed.cont[phaseRequestTrailers])
}

// decide routes the assembled body and returns the decision in the shape of the body mode.
func (x *exchange) decide(ctx context.Context, eos bool) resps {
	defer func() { x.body = nil }() // the answers keep what they send; the stream holds nothing more
	out, err := x.decideBody(ctx)
	if errors.Is(err, route.ErrCancelled) {
		// The client is gone (the stream's context ended): nothing was booked, and nobody
		// would read an answer. The loop sees the end next.
		x.done = true
		x.srv.metrics.Abandoned.Inc()
		return nil
	}
	if err != nil {
		return x.reject(err)
	}
	body, cleaned := x.body, false
	// The decision read the body exactly (route.ParseBody) and flagged its engine-control
	// members; a request that failed open may not have got that far.
	if out.Body.EngineControl || out.Decision.Reason == policy.ReasonFailureOpen {
		if body, cleaned, err = x.cleanBody(x.body); err != nil {
			out.Ticket.Cancel() // not routed: nothing else would release it
			return x.reject(err)
		}
	}
	if !x.fullDuplex() {
		if !cleaned {
			body = nil // BUFFERED: the body goes upstream unchanged, no mutation
		}
		return x.one(x.routedResponse(phaseRequestBody, &out, body))
	}
	return append(resps{x.routedResponse(phaseRequestHeaders, &out, body)},
		streamedBody(phaseRequestBody, body, eos)...)
}

// cleanBody cuts a client's engine-control members (kv_transfer_params and the others of
// route.EngineControlFields: only pd-sidecar may set them) from a whole body: it reports the
// body to send upstream and whether it differs from the client's. A body that cannot be read
// cannot be cleaned: the error wraps route.ErrInvalidBody.
func (x *exchange) cleanBody(body []byte) ([]byte, bool, error) {
	out, cut, err := route.Clean(body)
	if err != nil {
		return nil, false, err
	}
	x.countCut(cut)
	return out, len(cut) > 0, nil
}

func (x *exchange) countCut(cut []string) {
	for _, f := range cut {
		x.srv.metrics.StrippedFields.WithLabelValues(f).Inc()
	}
}

// echoBody passes on a chunk of a body whose route is fixed: BUFFERED sends the whole body in
// this one message, which is cleaned whole; STREAMED and full duplex chunks go through the
// stream's cleaner. A body that cannot be cleaned gets the engine's own 400 (errUncleanable):
// it was never condisagg's to judge; a body condisagg decides on keeps its invalid_body.
func (x *exchange) echoBody(chunk []byte, eos bool) resps {
	if x.clean == nil {
		if len(chunk) == 0 {
			return x.one(x.srv.fixed.cont[phaseRequestBody])
		}
		body, cleaned, err := x.cleanBody(chunk)
		if err != nil {
			return x.reject(fmt.Errorf("%w: %w", errUncleanable, err))
		}
		if !cleaned {
			return x.one(x.srv.fixed.cont[phaseRequestBody])
		}
		return x.one(bodyReplacement(body, true))
	}
	out, err := x.clean.Write(nil, chunk)
	if err == nil && eos {
		err = x.clean.Close()
	}
	if err != nil {
		x.countCut(x.clean.Cut())
		return x.reject(fmt.Errorf("%w: %w", errUncleanable, err))
	}
	if eos {
		x.countCut(x.clean.Cut())
	}
	if x.fullDuplex() {
		return streamedBody(phaseRequestBody, out, eos)
	}
	return x.one(bodyReplacement(out, false))
}

// decideBody routes the body; internal failures and a decision that found no free slot in
// time follow --failure-mode.
func (x *exchange) decideBody(ctx context.Context) (route.Outcome, error) {
	out, err := x.decideInSlot(ctx)
	switch {
	case err == nil:
		return out, nil
	case errors.Is(err, ErrOverloaded):
		x.srv.metrics.QueueTimeouts.Inc()
	case errors.Is(err, route.ErrInternal):
		x.srv.metrics.InternalErrors.Inc()
		if ok, dropped := x.srv.warnLog.allow(time.Now()); !ok {
			x.srv.metrics.LogsSuppressed.Inc()
		} else {
			x.srv.log.Warn("routing failed", "request_id", x.requestID, "policy", string(x.set.Policy.Disagg.Policy),
				"failure_mode", string(x.set.FailureMode), "err", clipTo(err.Error(), maxLoggedErrBytes), "suppressed", dropped)
		}
	default:
		return out, err
	}
	if x.set.FailureMode == FailOpen {
		// The request's own model when the body got that far; else the first model.
		return x.srv.router.Fallback(ctx, &route.Request{Subset: x.subset, HasSubset: x.hasSubset, Model: out.Body.Model},
			policy.ReasonFailureOpen)
	}
	return route.Outcome{}, err
}

// queueWait is how long the decision may wait for a slot at now: decision_queue_timeout,
// counted in BUFFERED mode from the headers answer, since Envoy's message_timeout for the body
// may have started then (a body that took long to reach us leaves less).
func (x *exchange) queueWait(now time.Time) time.Duration {
	d := x.set.queueTimeout()
	if !x.answeredHeaders.IsZero() {
		d -= now.Sub(x.answeredHeaders)
	}
	return d
}

// decideInSlot runs the decision pipeline in a decision slot.
func (x *exchange) decideInSlot(ctx context.Context) (route.Outcome, error) {
	x.client.large = len(x.body) >= LargeDecisionBytes
	wait, err := x.srv.slots.acquire(ctx, x.client, x.queueWait(time.Now()))
	x.srv.metrics.DecisionWait.Observe(wait.Seconds())
	if errors.Is(err, ErrOverloaded) {
		return route.Outcome{}, err
	}
	if err != nil {
		return route.Outcome{}, fmt.Errorf("%w: decision slot: %w", route.ErrCancelled, err) // the stream went away
	}
	defer x.srv.slots.release(x.client)
	if x.sloErr != nil {
		return route.Outcome{}, x.sloErr
	}
	return x.srv.router.Decide(ctx, &route.Request{Endpoint: x.ep, Body: x.body, Subset: x.subset, HasSubset: x.hasSubset, SLO: x.slo,
		Session: x.session})
}

// routedResponse records a routing outcome and builds its response; body, when not nil, is
// the request body as it goes upstream (full duplex, or a cleaned BUFFERED body).
func (x *exchange) routedResponse(p phase, out *route.Outcome, body []byte) *extprocv3.ProcessingResponse {
	if x.routed {
		x.resp.fail(x) // unreachable (one request per stream); never let a booking go untracked
	}
	x.out, x.routed, x.decidedAt = *out, true, time.Now()
	x.resp.start(out)
	x.srv.metrics.decided(x.set.Policy.Disagg.Policy, out)
	x.seq = x.srv.recent.Add(x.decidedAt, x.requestID, out)
	if out.Decision.Reason == policy.ReasonRemotePolicyError {
		x.srv.warnPolicyError(x.requestID, out.Decision.Inputs.Err)
	}
	if log := x.srv.log; log.Enabled(context.Background(), -4) {
		in := &out.Decision.Inputs
		log.Debug("decision", "request_id", x.requestID, "route", out.Route.String(), "reason", out.Reason,
			"decode", out.Decode.ID, "prefill", out.Prefill.ID, "isl", out.Tokens, "cached", in.Cached,
			"eff", in.Eff, "ratio", in.Ratio, "prefill_busy", in.PrefillBusy.String(), "pdb", in.ProjectedBlocks,
			"kvcap", in.KVCapacity, "gate", out.Decision.Gate.String(), "booking", out.BookingID)
	}
	return decisionResponse(p, x.set, out, x.strip, body, x.fullDuplex())
}

// reject answers with an immediate error response; the stream then only drains.
func (x *exchange) reject(err error) resps {
	e := toHTTPError(err)
	x.done = true
	x.srv.metrics.Rejected.WithLabelValues(e.Reason).Inc()
	if errors.Is(err, route.ErrUnknownModel) {
		x.srv.metrics.UnknownModel.WithLabelValues("reject").Inc()
	}
	x.warnRejected(e.Reason, err)
	return x.one(immediateResponse(e))
}

// bodyModeMisconfig: STREAMED, BUFFERED_PARTIAL and NONE request body modes cannot carry
// a body-time decision; completions are routed like bodyless requests, warned once, counted.
func (x *exchange) bodyModeMisconfig() {
	x.srv.metrics.StreamedBodyMode.Inc()
	if !x.srv.warnedModes.Swap(true) {
		x.srv.log.Warn("request body mode cannot carry a decision; routing completions without one "+
			"(configure BUFFERED or FULL_DUPLEX_STREAMED)", "mode", x.reqMode.String())
	}
}

// responseHeaders observes the upstream status and answers at once.
func (x *exchange) responseHeaders(req *extprocv3.ProcessingRequest, h *extprocv3.HttpHeaders) resps {
	x.sawResponse = true
	x.resp.served(x, servedEndpoint(req.GetMetadataContext()))
	rh := responseHead{prefillMs: -1, prefillCached: -1}
	for _, hv := range h.GetHeaders().GetHeaders() {
		switch strings.ToLower(hv.GetKey()) {
		case ":status":
			rh.code, _ = strconv.Atoi(headerValue(hv))
		case "content-type":
			rh.contentType = headerValue(hv)
		case headerPrefillMs:
			if ms, err := strconv.ParseInt(headerValue(hv), 10, 64); err == nil && ms >= 0 {
				rh.prefillMs = ms
			}
		case headerKVTransfer:
			rh.kvTransfer = headerValue(hv)
		case headerPrefillCachedTokens:
			if n, err := strconv.ParseInt(headerValue(hv), 10, 64); err == nil && n >= 0 {
				rh.prefillCached = n
			}
		}
	}
	x.resp.headers(x, rh, h.GetEndOfStream())
	if x.routed && x.set.DebugHeaders {
		return x.one(responseHeadersResponse(decisionText(&x.out)))
	}
	return x.one(x.srv.fixed.cont[phaseResponseHeaders])
}

// responseBody observes one chunk and passes it on unchanged.
func (x *exchange) responseBody(b *extprocv3.HttpBody) resps {
	x.resp.body(x, b.GetBody(), b.GetEndOfStream())
	if x.respMode == filterv3.ProcessingMode_FULL_DUPLEX_STREAMED {
		return streamedBody(phaseResponseBody, b.GetBody(), b.GetEndOfStream())
	}
	return x.one(x.srv.fixed.cont[phaseResponseBody])
}

func (x *exchange) responseTrailers() resps {
	x.resp.fail(x) // trailers end the response; a finished answer ended before
	return x.one(x.srv.fixed.cont[phaseResponseTrailers])
}

// end runs when the stream is over: a booking still held means the client went away. A
// remote-prefill request whose answer was never classified is noted as such for Admin Recent.
func (x *exchange) end() {
	x.resp.cancel(x)
	if x.routed && x.resp.prefillID != "" && !x.resp.classified {
		x.srv.transfers.endedUnclassified(x.seq)
	}
}

func headerValue(hv *corev3.HeaderValue) string {
	if len(hv.GetRawValue()) > 0 {
		return string(hv.GetRawValue())
	}
	return hv.GetValue()
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// subsetHint reads envoy.lb.subset_hint (a list or a comma string of ip:port).
func subsetHint(md *corev3.Metadata) ([]string, bool) {
	ns, ok := md.GetFilterMetadata()[SubsetNamespace]
	if !ok {
		return nil, false
	}
	v, ok := ns.GetFields()[SubsetKey]
	if !ok {
		return nil, false
	}
	var out []string
	if l := v.GetListValue(); l != nil {
		for _, e := range l.GetValues() {
			out = appendAddrs(out, e.GetStringValue())
		}
		return out, true
	}
	return appendAddrs(out, v.GetStringValue()), true
}

// servedEndpoint reads envoy.lb x-gateway-destination-endpoint-served ("" when absent).
func servedEndpoint(md *corev3.Metadata) string {
	ns, ok := md.GetFilterMetadata()[MetadataNamespace]
	if !ok {
		return ""
	}
	return ns.GetFields()[ServedKey].GetStringValue()
}

func appendAddrs(dst []string, s string) []string {
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			dst = append(dst, a)
		}
	}
	return dst
}

func bodyTooLarge(n, limit int) error {
	return fmt.Errorf("%w: request body of at least %d bytes is over the limit of %d bytes", ErrBodyTooLarge, n, limit)
}
