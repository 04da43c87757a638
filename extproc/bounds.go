package extproc

import (
	"errors"
	"fmt"
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

// boundKind is which bound of a stream's phase runs (README "Resource bounds").
type boundKind uint8

const (
	boundNone       boundKind = iota // the request is complete and answered: the upstream's time
	boundIdle                        // stream_idle_timeout: nothing received for this long
	boundRequest                     // stream_request_timeout: the request phase as a whole
	boundUnanswered                  // unanswered_booking_timeout: decided, no response yet
)

// bound is the stream's next deadline: kind fires after after.
type bound struct {
	kind  boundKind
	after time.Duration
}

// nextBound is the bound that runs at now. While the request is incomplete, the idle timeout
// restarts with every message but never runs past the request phase's absolute deadline, so
// a trickle of bytes cannot keep a stream (and its buffered body) alive; once decided, a
// booking waits at most unanswered_booking_timeout for response headers.
func (x *exchange) nextBound(now time.Time) bound {
	if x.awaitingRequest() {
		b := bound{kind: boundIdle, after: x.set.idleTimeout()}
		if left := x.started.Add(x.set.requestTimeout()).Sub(now); left < b.after {
			b = bound{kind: boundRequest, after: max(left, 0)}
		}
		return b
	}
	if x.routed && !x.sawResponse && x.resp.following() && !x.resp.freedEarly {
		return bound{kind: boundUnanswered, after: max(x.decidedAt.Add(x.set.unansweredTimeout()).Sub(now), 0)}
	}
	return bound{}
}

// releaseUnanswered releases the booking of a decided stream that saw no response in time;
// the stream stays open and a late answer is still observed and classified (a slow
// non-streamed answer sends its headers only at its end), its releases then no-ops.
func (x *exchange) releaseUnanswered() {
	if !x.resp.following() || x.resp.freedEarly {
		return
	}
	x.resp.freedEarly = true
	x.resp.ticket.Release()
	x.srv.metrics.UnansweredReleases.Inc()
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
		x.srv.buffered.Add(int64(n - x.held))
		x.held = n
	}
	if x.srv.onHeld != nil {
		x.srv.onHeld(n)
	}
}

// unaccount removes the stream's bytes from the gauge when it ends.
func (x *exchange) unaccount() {
	x.srv.metrics.BufferedBytes.Sub(float64(x.held))
	x.srv.buffered.Add(-int64(x.held))
	x.held = 0
}

// requestExpired ends a stream whose request did not arrive in time (b: idle or the
// request phase's deadline): its bookings are released first (nothing may outlive the
// stream, even if the peer stops reading), then, unless an immediate response was already
// sent, a 408 tells the client why.
func (x *exchange) requestExpired(stream ProcessStream, b bound) error {
	x.srv.metrics.IdleTimeouts.Inc()
	x.end()
	x.body = nil
	x.account()
	e, st := idleError(x.set.idleTimeout()), idleStatus(x.set.idleTimeout())
	if b.kind == boundRequest {
		e, st = requestTimeoutError(x.set.requestTimeout()), requestTimeoutStatus(x.set.requestTimeout())
	}
	if !x.done {
		x.done = true
		x.srv.metrics.Rejected.WithLabelValues(e.Reason).Inc()
		x.warnRejected(e.Reason, nil)
		_ = stream.Send(immediateResponse(e)) // best effort: the stream ends next either way
	}
	return st
}

// reserveBody books in the server's total the bytes by which appending chunk grows the
// stream's body (its capacity, as appendBounded will grow it), before they are held: streams
// check and book in one step, so together they never pass max_buffered_bytes. It reports
// false, booking nothing, when the growth would pass the cap; account later finds the growth
// already counted.
func (x *exchange) reserveBody(chunk []byte) bool {
	grow := cap(chunk) // the first chunk becomes the body as it is
	if x.body != nil {
		grow = 0
		if n := len(x.body) + len(chunk); n > cap(x.body) {
			grow = min(max(2*cap(x.body), n), max(x.set.MaxBodyBytes, n)) - cap(x.body)
		}
	}
	limit := x.set.maxBuffered()
	for {
		cur := x.srv.buffered.Load()
		if cur+int64(grow) > limit && grow > 0 {
			return false
		}
		if x.srv.buffered.CompareAndSwap(cur, cur+int64(grow)) {
			break
		}
	}
	x.held += grow
	x.srv.metrics.BufferedBytes.Add(float64(grow))
	return true
}

// errBufferFull is the refusal of a body chunk that would pass max_buffered_bytes.
func errBufferFull(n int, limit int64) error {
	return fmt.Errorf("%w: %d more body bytes would pass the %d bytes all streams may hold together (max_buffered_bytes)", ErrOverloaded, n, limit)
}
