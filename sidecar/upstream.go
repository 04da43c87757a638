package sidecar

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// leg names one of the two upstream calls of a request.
type leg string

const (
	legPrefill leg = "prefill"
	legDecode  leg = "decode"
)

// Reasons of a failed attempt (the upstream_errors_total and prefill_fallbacks_total labels).
const (
	reasonConnect   = "connect"   // no connection (refused, unreachable, connect timeout)
	reasonTimeout   = "timeout"   // prefill total or decode first-byte timeout
	reasonTransport = "transport" // the connection failed after the request was sent
	reasonStatus    = "status"    // an HTTP error status
	reasonBadAnswer = "bad_response"
	reasonNoKV      = "no_kv_transfer_params"
	reasonCanceled  = "canceled" // the client went away
)

// errFirstByteTimeout is the cancel cause of a decode attempt whose headers came too late.
var errFirstByteTimeout = errors.New("decode first-byte timeout")

// upstream is one upstream response; close releases the body and the attempt's context.
type upstream struct {
	resp   *http.Response
	cancel context.CancelCauseFunc
}

func (u *upstream) close() {
	_ = u.resp.Body.Close()
	u.cancel(nil)
}

// legFailure is an upstream leg that produced no response to relay.
type legFailure struct {
	reason string
	err    error
}

func (f *legFailure) Error() string { return f.reason + ": " + f.err.Error() }
func (f *legFailure) Unwrap() error { return f.err }

// call sends one leg to host with retries: a connect failure or a 502/503/504 answer is tried
// again, up to MaxAttempts, with doubling backoff. Nothing has been sent to the client yet, so
// a retry is always safe for the client. firstByte > 0 bounds each attempt's wait for headers.
// The last answer is returned whatever its status; the caller closes it.
func (p *Proxy) call(ctx context.Context, lg leg, host string, r *http.Request, body []byte, hdr http.Header, firstByte time.Duration) (*upstream, *legFailure) {
	backoff := p.cfg.RetryBackoff
	for attempt := 1; ; attempt++ {
		up, fail := p.attempt(ctx, host, r, body, hdr, firstByte)
		retry := fail != nil && fail.reason == reasonConnect ||
			fail == nil && retryableStatus(up.resp.StatusCode)
		if !retry || attempt >= p.cfg.MaxAttempts {
			if fail != nil {
				p.m.UpstreamErrors.WithLabelValues(string(lg), fail.reason).Inc()
			} else if up.resp.StatusCode >= 400 {
				p.m.UpstreamErrors.WithLabelValues(string(lg), reasonStatus).Inc()
			}
			return up, fail
		}
		if fail == nil {
			p.m.UpstreamErrors.WithLabelValues(string(lg), reasonStatus).Inc()
			_, _ = io.Copy(io.Discard, io.LimitReader(up.resp.Body, 64<<10))
			up.close()
		} else {
			p.m.UpstreamErrors.WithLabelValues(string(lg), fail.reason).Inc()
		}
		p.m.Retries.WithLabelValues(string(lg)).Inc()
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, p.contextFailure(ctx)
		case <-t.C:
		}
		backoff = min(2*backoff, p.cfg.RetryBackoffMax)
	}
}

func retryableStatus(code int) bool {
	return code == http.StatusBadGateway || code == http.StatusServiceUnavailable || code == http.StatusGatewayTimeout
}

// attempt sends the request once and returns the response headers.
func (p *Proxy) attempt(ctx context.Context, host string, r *http.Request, body []byte, hdr http.Header, firstByte time.Duration) (*upstream, *legFailure) {
	actx, cancel := context.WithCancelCause(ctx)
	var timer *time.Timer
	if firstByte > 0 {
		timer = time.AfterFunc(firstByte, func() { cancel(errFirstByteTimeout) })
	}
	req, err := http.NewRequestWithContext(actx, r.Method, "http://"+host+"/", bodyReader(body))
	if err != nil {
		cancel(nil)
		return nil, &legFailure{reasonTransport, fmt.Errorf("build request for %s: %w", host, err)}
	}
	req.URL.Path, req.URL.RawPath, req.URL.RawQuery = r.URL.Path, r.URL.RawPath, r.URL.RawQuery
	req.Header = hdr
	resp, err := p.transport.RoundTrip(req)
	if timer != nil && !timer.Stop() && err == nil {
		_ = resp.Body.Close()
		err = errFirstByteTimeout
	}
	if err != nil {
		defer cancel(nil)
		if errors.Is(context.Cause(actx), errFirstByteTimeout) {
			return nil, &legFailure{reasonTimeout, fmt.Errorf("%s %s: %w", r.Method, host, errFirstByteTimeout)}
		}
		if ctx.Err() != nil {
			return nil, p.contextFailure(ctx)
		}
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return nil, &legFailure{reasonConnect, fmt.Errorf("connect %s: %w", host, err)}
		}
		return nil, &legFailure{reasonTransport, fmt.Errorf("%s %s: %w", r.Method, host, err)}
	}
	return &upstream{resp: resp, cancel: cancel}, nil
}

// contextFailure classifies a cancelled parent context: a deadline is the prefill timeout,
// anything else is the client going away.
func (p *Proxy) contextFailure(ctx context.Context) *legFailure {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return &legFailure{reasonTimeout, ctx.Err()}
	}
	return &legFailure{reasonCanceled, ctx.Err()}
}

func bodyReader(body []byte) io.Reader {
	if len(body) == 0 {
		return nil
	}
	return bytes.NewReader(body)
}

// readBounded reads a whole upstream body of at most limit bytes.
func readBounded(r io.Reader, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("response body exceeds %d bytes", limit)
	}
	return b, nil
}
