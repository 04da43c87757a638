package extproc

import (
	"errors"
	"time"
)

// Resource bounds of the ext_proc path (README "Resource bounds"): the bytes one stream holds,
// how long a stream may wait for the rest of its request, and how many decisions run at once.

// ErrOverloaded: no decision slot became free within Settings.DecisionQueueTimeout.
var ErrOverloaded = errors.New("decision queue timeout")

// appendBounded appends src to dst like append, but grows dst's capacity to at most limit
// (len(dst)+len(src) <= limit is the caller's check), so an assembled body never holds more
// than max_body_bytes.
func appendBounded(dst, src []byte, limit int) []byte {
	n := len(dst) + len(src)
	if n <= cap(dst) {
		return append(dst, src...)
	}
	grown := make([]byte, len(dst), min(max(2*cap(dst), n), max(limit, n)))
	copy(grown, dst)
	return append(grown, src...)
}

// awaitingRequest reports whether the stream waits for more of its request, the only time the
// idle timer runs: no headers yet, a body not complete, or an immediate response sent and no
// end of stream yet. Once the request is complete the stream waits for the upstream, which
// may be silent for minutes (Envoy's route timeouts and the booking TTL bound that).
func (x *exchange) awaitingRequest() bool {
	return x.done || x.state != reqComplete
}

// heldBytes is what the stream holds in memory: the request body being assembled, the SSE
// tail and the copy of a non-streaming answer. Each is bounded (max_body_bytes, MaxSSETail,
// MaxJSONResponse) and the body is dropped once decided or rejected.
func (x *exchange) heldBytes() int {
	return cap(x.body) + cap(x.resp.sse.buf) + cap(x.resp.json)
}

// account brings condisagg_extproc_buffered_bytes up to date with this stream's heldBytes.
func (x *exchange) account() {
	n := x.heldBytes()
	if n != x.held {
		x.srv.metrics.BufferedBytes.Add(float64(n - x.held))
		x.held = n
	}
	if x.srv.onHeld != nil {
		x.srv.onHeld(n)
	}
}

// unaccount removes the stream's bytes from the gauge when it ends.
func (x *exchange) unaccount() {
	x.srv.metrics.BufferedBytes.Sub(float64(x.held))
	x.held = 0
}

// idleExpired ends a stream that received nothing for idle while awaiting its request: its
// bookings are released first (nothing may outlive the stream, even if the peer stops reading),
// then, unless an immediate response was already sent, a 408 tells the client why.
func (x *exchange) idleExpired(stream ProcessStream, idle time.Duration) error {
	x.srv.metrics.IdleTimeouts.Inc()
	x.end()
	x.body = nil
	x.account()
	if !x.done {
		x.done = true
		e := idleError(idle)
		x.srv.metrics.Rejected.WithLabelValues(e.Reason).Inc()
		x.srv.log.Warn("request rejected", "request_id", x.requestID, "reason", e.Reason)
		_ = stream.Send(immediateResponse(e)) // best effort: the stream ends next either way
	}
	return idleStatus(idle)
}
