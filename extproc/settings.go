package extproc

import (
	"errors"
	"fmt"
	"time"

	"github.com/condisagg/condisagg/policy"
	"github.com/condisagg/condisagg/route"
)

// FailureMode says what an internal routing failure does (ARCHITECTURE §2).
type FailureMode string

const (
	// FailOpen routes to the least-loaded decode worker (local prefill), nothing booked.
	FailOpen FailureMode = "open"
	// FailClosed answers 503.
	FailClosed FailureMode = "closed"
)

// DefaultMaxBodyBytes is the default request body limit (10 MiB, as GIE's lwepp).
const DefaultMaxBodyBytes = 10 << 20

// MaxMaxBodyBytes bounds max_body_bytes (1 GiB): the gRPC message limit is derived from it and
// a body is held in memory whole.
const MaxMaxBodyBytes = 1 << 30

// DefaultStreamIdleTimeout is how long a stream may wait for the rest of its request (the next
// message from Envoy before the request body is complete) by default: Envoy's request_timeout
// of the reference bootstrap, so behind it condisagg never cuts an upload Envoy would accept.
const DefaultStreamIdleTimeout = 60 * time.Second

// DefaultDecisionQueueTimeout is how long a decision waits for a free decision slot by default:
// half of the reference bootstrap's 2 s ext_proc message_timeout, so a burst is answered (by
// --failure-mode) before Envoy gives up on the message.
const DefaultDecisionQueueTimeout = time.Second

// DefaultStreamRequestTimeout bounds the whole request phase of a stream (headers to a
// complete body) by default: Envoy's request_timeout of the reference bootstrap. Unlike the
// idle timeout, a trickle of bytes does not extend it.
const DefaultStreamRequestTimeout = 60 * time.Second

// DefaultUnansweredBookingTimeout is how long a decided stream may wait for its response
// headers before its booking is released by default: a routed request that never reaches
// an upstream (a stranger holding decided streams open) must not hold load for booking_ttl.
const DefaultUnansweredBookingTimeout = 30 * time.Second

// DefaultMaxBufferedBytes bounds the bytes all open streams hold together by default.
const DefaultMaxBufferedBytes = 256 << 20

// Bounds of the duration settings.
const (
	MinStreamIdleTimeout    = time.Second
	MaxStreamIdleTimeout    = time.Hour
	MinDecisionQueueTimeout = time.Millisecond
	MaxDecisionQueueTimeout = time.Minute
)

// Settings are the reloadable knobs of the ext_proc path. A validated Settings is never
// modified; a reload validates a new one and swaps it in.
type Settings struct {
	Policy *policy.Config // validated
	// Shadow is the candidate policy config evaluated beside Policy (nil: none); route.Router
	// counts the agreement.
	Shadow       *policy.Config
	MaxBodyBytes int
	FailureMode  FailureMode
	DebugHeaders bool // x-condisagg-decision on the request and the response
	LLMDCompat   bool // x-prefiller-host-port on the remote path
	// StreamIdleTimeout ends a stream whose request is incomplete (no headers yet, body not
	// complete, or an immediate response sent and no end of stream) and that received nothing
	// for this long; 0 = DefaultStreamIdleTimeout. The response phase has no such timer (a
	// non-streamed generation is silent until done).
	StreamIdleTimeout time.Duration
	// DecisionQueueTimeout bounds the wait for a decision slot (ServerOptions.
	// DecisionConcurrency); past it the request is routed by --failure-mode without a decision.
	// 0 = DefaultDecisionQueueTimeout.
	DecisionQueueTimeout time.Duration
	// StreamRequestTimeout bounds a stream's request phase as a whole, from the stream's
	// start to its complete body, however often bytes arrive; past it the stream ends like
	// an idle one. 0 = DefaultStreamRequestTimeout; range as StreamIdleTimeout.
	StreamRequestTimeout time.Duration
	// UnansweredBookingTimeout releases the booking of a decided stream that has seen no
	// response headers for this long (the stream stays open; a late answer is still
	// observed). A non-streaming answer whose generation takes longer loses its booking
	// early: raise it towards booking_ttl for long non-streaming generations.
	// 0 = DefaultUnansweredBookingTimeout; range as StreamIdleTimeout.
	UnansweredBookingTimeout time.Duration
	// MaxBufferedBytes bounds the bytes every open stream holds together (request bodies
	// being assembled, SSE tails, answer copies); a body chunk that would pass it gets 503
	// overloaded. 0 = DefaultMaxBufferedBytes.
	MaxBufferedBytes int64
	// SessionHeaders are the request headers that name a session, in order of precedence
	// (lower case); the first one present with a usable value is the request's
	// route.Request.Session. A value longer than route.MaxSessionIDBytes or holding anything
	// but visible ASCII is ignored and counted, never refused. Empty: no session is read.
	SessionHeaders []string
}

// DefaultSessionHeaders are the session headers of Dynamo's router and of the Claude Code and
// Codex clients (server setting session.headers).
var DefaultSessionHeaders = []string{"x-dynamo-session-id", "x-claude-code-session-id", "session_id"}

// The router's session affinity defaults, for serve's session.ttl and session.max_sessions
// (its config package may not import route).
const (
	DefaultSessionTTL  = route.DefaultSessionTTL
	DefaultMaxSessions = route.DefaultMaxSessions
)

// MaxSessionHeaders bounds SessionHeaders: every request header is compared with each.
const MaxSessionHeaders = 8

// requestTimeout is StreamRequestTimeout with its default.
func (s *Settings) requestTimeout() time.Duration {
	if s.StreamRequestTimeout == 0 {
		return DefaultStreamRequestTimeout
	}
	return s.StreamRequestTimeout
}

// unansweredTimeout is UnansweredBookingTimeout with its default.
func (s *Settings) unansweredTimeout() time.Duration {
	if s.UnansweredBookingTimeout == 0 {
		return DefaultUnansweredBookingTimeout
	}
	return s.UnansweredBookingTimeout
}

// maxBuffered is MaxBufferedBytes with its default.
func (s *Settings) maxBuffered() int64 {
	if s.MaxBufferedBytes == 0 {
		return DefaultMaxBufferedBytes
	}
	return s.MaxBufferedBytes
}

// idleTimeout is StreamIdleTimeout with its default.
func (s *Settings) idleTimeout() time.Duration {
	if s.StreamIdleTimeout == 0 {
		return DefaultStreamIdleTimeout
	}
	return s.StreamIdleTimeout
}

// queueTimeout is DecisionQueueTimeout with its default.
func (s *Settings) queueTimeout() time.Duration {
	if s.DecisionQueueTimeout == 0 {
		return DefaultDecisionQueueTimeout
	}
	return s.DecisionQueueTimeout
}

// Validate returns every problem of s in the field/value/rule form.
func (s *Settings) Validate() error {
	var errs []error
	if s.Policy == nil {
		errs = append(errs, errors.New("extproc: settings: policy config is required"))
	}
	if s.MaxBodyBytes <= 0 || s.MaxBodyBytes > MaxMaxBodyBytes {
		errs = append(errs, fmt.Errorf("max_body_bytes: %d is outside [1, %d]", s.MaxBodyBytes, MaxMaxBodyBytes))
	}
	if s.FailureMode != FailOpen && s.FailureMode != FailClosed {
		errs = append(errs, fmt.Errorf("failure_mode: %q must be one of open, closed", s.FailureMode))
	}
	if d := s.StreamIdleTimeout; d != 0 && (d < MinStreamIdleTimeout || d > MaxStreamIdleTimeout) {
		errs = append(errs, fmt.Errorf("stream_idle_timeout: %s is outside [%s, %s]", d, MinStreamIdleTimeout, MaxStreamIdleTimeout))
	}
	if d := s.DecisionQueueTimeout; d != 0 && (d < MinDecisionQueueTimeout || d > MaxDecisionQueueTimeout) {
		errs = append(errs, fmt.Errorf("decision_queue_timeout: %s is outside [%s, %s]", d, MinDecisionQueueTimeout, MaxDecisionQueueTimeout))
	}
	if d := s.StreamRequestTimeout; d != 0 && (d < MinStreamIdleTimeout || d > MaxStreamIdleTimeout) {
		errs = append(errs, fmt.Errorf("stream_request_timeout: %s is outside [%s, %s]", d, MinStreamIdleTimeout, MaxStreamIdleTimeout))
	}
	if d := s.UnansweredBookingTimeout; d != 0 && (d < MinStreamIdleTimeout || d > MaxStreamIdleTimeout) {
		errs = append(errs, fmt.Errorf("unanswered_booking_timeout: %s is outside [%s, %s]", d, MinStreamIdleTimeout, MaxStreamIdleTimeout))
	}
	if len(s.SessionHeaders) > MaxSessionHeaders {
		errs = append(errs, fmt.Errorf("session.headers: %d headers is more than %d", len(s.SessionHeaders), MaxSessionHeaders))
	}
	for _, h := range s.SessionHeaders {
		if !validHeaderName(h) {
			errs = append(errs, fmt.Errorf("session.headers: %q must be a lower-case header name (letters, digits, '-', '_')", h))
		}
	}
	if n := s.MaxBufferedBytes; n < 0 || (n > 0 && n < int64(s.MaxBodyBytes)) {
		errs = append(errs, fmt.Errorf("max_buffered_bytes: %d must be 0 (default %d) or at least max_body_bytes (%d): one body must fit",
			n, int64(DefaultMaxBufferedBytes), s.MaxBodyBytes))
	}
	return errors.Join(errs...)
}

// validHeaderName: a non-empty lower-case HTTP header name as gateways pass them on (Envoy
// lower-cases every name; ':' pseudo-headers are not session headers).
func validHeaderName(h string) bool {
	if h == "" || len(h) > 64 {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
