package sidecar

import (
	"context"
	"net/http"
	"strconv"
	"time"
)

// statusClientClosed is the requests_total code of a request whose client went away (nginx's 499).
const statusClientClosed = 499

// prefillOutcome is the result of the prefill leg: an answer, or a failure with either P's own
// error response (relayed unchanged when there is no fallback) or an error of the sidecar.
type prefillOutcome struct {
	ans      prefillAnswer
	reason   string // "" on success
	fallback bool   // a failure that local prefill at D may serve
	resp     *bufferedResponse
	apiErr   *apiError
}

// bufferedResponse is an upstream answer read whole.
type bufferedResponse struct {
	status int
	header http.Header
	body   []byte
}

// remote runs the NixlConnector flow (vllm-kv-events.md §6.3): prefill at P, then decode at D
// with P's kv_transfer_params, or the configured fallback when the prefill fails.
func (p *Proxy) remote(ctx context.Context, ex *exchange) {
	req, err := parseObject(ex.body)
	if err != nil {
		p.reject(ex, errInvalidBody(err))
		return
	}
	stream := isTrue(req.last(keyStream))
	start := time.Now()
	out := p.prefill(ctx, ex, req)
	// The prefill worker is done with the request whatever the outcome: say so on the response,
	// so the router frees its prefill load now rather than at D's first token.
	ex.w.Header().Set(HeaderPrefillMs, strconv.FormatInt(time.Since(start).Milliseconds(), 10))
	switch {
	case out.reason == "":
		if out.ans.cachedKnown {
			ex.w.Header().Set(HeaderPrefillCachedTokens, strconv.FormatInt(out.ans.cachedTokens, 10))
		}
		p.decodeRemote(ctx, ex, req, out.ans, stream)
	case out.reason == reasonCanceled:
		p.m.ClientCancels.Inc()
		p.countRequest(modeRemote, statusClientClosed)
	case out.fallback && p.cfg.Fallback == FallbackLocal:
		p.m.Fallbacks.WithLabelValues(out.reason).Inc()
		p.log.Debug("prefill failed, local prefill at decode", "request_id", ex.id, "endpoint", ex.prefill, "reason", out.reason)
		ex.w.Header().Set(HeaderKVTransfer, KVTransferFallback)
		p.decode(ctx, ex, localBody(req), stream, nil, modeFallback)
	case out.resp != nil:
		p.countRequest(modePrefillError, out.resp.status)
		p.writeBuffered(ex.w, out.resp)
	default:
		p.countRequest(modePrefillError, out.apiErr.status)
		out.apiErr.write(ex.w, ex.id)
	}
}

// prefill runs the prefill leg under PrefillTimeout and reads P's answer.
func (p *Proxy) prefill(ctx context.Context, ex *exchange, req object) prefillOutcome {
	pctx, cancel := context.WithTimeout(ctx, p.cfg.PrefillTimeout)
	defer cancel()
	start := time.Now()
	defer func() { p.m.PrefillSeconds.Observe(time.Since(start).Seconds()) }()

	up, fail := p.call(pctx, legPrefill, ex.prefill, ex.r, prefillBody(req, ex.r.URL.Path), prefillHeader(ex.hdr, ex.prefillRank), 0)
	if fail != nil {
		return failedPrefill(fail.reason)
	}
	defer up.close()
	body, err := readBounded(up.resp.Body, p.cfg.MaxResponseBytes)
	if err != nil {
		reason := reasonBadAnswer
		if pctx.Err() != nil {
			reason = p.contextFailure(pctx).reason
		}
		p.m.UpstreamErrors.WithLabelValues(string(legPrefill), reason).Inc()
		return failedPrefill(reason)
	}
	if code := up.resp.StatusCode; code/100 != 2 {
		return prefillOutcome{
			reason:   reasonStatus,
			fallback: code >= 500 || code == http.StatusRequestTimeout || code == http.StatusTooManyRequests,
			resp:     &bufferedResponse{status: code, header: up.resp.Header, body: body},
		}
	}
	ans, err := parsePrefillAnswer(body)
	if err != nil {
		p.m.UpstreamErrors.WithLabelValues(string(legPrefill), reasonNoKV).Inc()
		p.log.Debug("prefill answer unusable", "request_id", ex.id, "endpoint", ex.prefill, "err", err)
		return failedPrefill(reasonNoKV)
	}
	return prefillOutcome{ans: ans}
}

func failedPrefill(reason string) prefillOutcome {
	return prefillOutcome{reason: reason, fallback: reason != reasonCanceled, apiErr: upstreamError(legPrefill, reason)}
}

// decode sends the decode leg (or the passthrough request) to D and relays its answer.
// Streaming requests wait at most DecodeFirstByteTimeout for D's headers.
func (p *Proxy) decode(ctx context.Context, ex *exchange, body []byte, stream bool, u *usageRewriter, mode string) {
	var firstByte time.Duration
	if stream {
		firstByte = p.cfg.DecodeFirstByteTimeout
	}
	up, ok := p.callDecode(ctx, ex, body, firstByte, mode)
	if !ok {
		return
	}
	defer up.close()
	p.countRequest(mode, up.resp.StatusCode)
	p.log.Debug("request routed", "request_id", ex.id, "route", mode, "endpoint", ex.decode)
	p.relay(ctx, ex, up.resp, u)
}

// callDecode sends a decode leg and returns D's answer, or answers the client itself and
// returns false when D gave none.
func (p *Proxy) callDecode(ctx context.Context, ex *exchange, body []byte, firstByte time.Duration, mode string) (*upstream, bool) {
	start := time.Now()
	up, fail := p.call(ctx, legDecode, ex.decode, ex.r, body, ex.hdr, firstByte)
	if fail != nil {
		if fail.reason == reasonCanceled {
			p.m.ClientCancels.Inc()
			p.countRequest(mode, statusClientClosed)
			return nil, false
		}
		e := upstreamError(legDecode, fail.reason)
		p.log.Debug("decode failed", "request_id", ex.id, "endpoint", ex.decode, "err", fail.err)
		p.countRequest(mode, e.status)
		e.write(ex.w, ex.id)
		return nil, false
	}
	p.m.FirstByte.Observe(time.Since(start).Seconds())
	return up, true
}

// writeBuffered relays an upstream answer that was read whole.
func (p *Proxy) writeBuffered(w http.ResponseWriter, b *bufferedResponse) {
	copyResponseHeader(w.Header(), b.header, false)
	w.Header().Set("Content-Length", strconv.Itoa(len(b.body)))
	w.WriteHeader(b.status)
	_, _ = w.Write(b.body)
}
