package sidecar

import (
	"context"
	"io"
	"mime"
	"net/http"
	"strconv"
)

// relay streams D's answer to the client: status and end-to-end headers unchanged, then the
// body chunk by chunk, flushed after every read for event streams and unsized bodies. With a
// usage rewriter and a 2xx answer, event-stream lines carrying usage are rewritten on the fly
// and a JSON body is rewritten whole. A read error after the headers went out aborts the
// client connection (http.ErrAbortHandler) so the client sees a truncated answer, not a
// complete one.
func (p *Proxy) relay(ctx context.Context, ex *exchange, resp *http.Response, u *usageRewriter) {
	ok := resp.StatusCode/100 == 2
	sse := isEventStream(resp.Header)
	if u != nil && ok && !sse {
		p.relayJSON(ctx, ex, resp, *u)
		return
	}
	var sw *sseUsage
	if u != nil && ok {
		sw = &sseUsage{u: *u, maxLineBytes: p.cfg.MaxSSELineBytes}
	}
	h := ex.w.Header()
	copyResponseHeader(h, resp.Header, sw == nil)
	for k := range resp.Trailer {
		h.Add("Trailer", k)
	}
	ex.w.WriteHeader(resp.StatusCode)
	flush := sse || resp.ContentLength < 0
	rc := http.NewResponseController(ex.w)
	if flush {
		_ = rc.Flush()
	}
	bp := p.bufs.Get().(*[]byte)
	defer p.bufs.Put(bp)
	buf := *bp
	var out []byte
	for {
		n, rerr := resp.Body.Read(buf)
		chunk := buf[:n]
		if sw != nil {
			out = sw.feed(out[:0], chunk)
			chunk = out
			if rerr != nil {
				out = sw.finish(out)
				chunk = out
			}
		}
		if len(chunk) > 0 {
			if _, werr := ex.w.Write(chunk); werr != nil {
				p.m.ClientCancels.Inc()
				return
			}
			if flush {
				_ = rc.Flush()
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			p.abort(ctx, ex, rerr)
		}
	}
	if sw != nil {
		p.countUsage(sw)
	}
	for k, vs := range resp.Trailer {
		h[k] = vs
	}
}

// abort ends a relay whose upstream read failed: a gone client is only counted; a failing D
// aborts the client connection.
func (p *Proxy) abort(ctx context.Context, ex *exchange, err error) {
	if ctx.Err() != nil {
		p.m.ClientCancels.Inc()
		panic(http.ErrAbortHandler)
	}
	p.m.StreamAborts.Inc()
	p.log.Debug("decode stream failed", "request_id", ex.id, "endpoint", ex.decode, "err", err)
	panic(http.ErrAbortHandler) // net/http's way to cut a response short; the server recovers it
}

func (p *Proxy) countUsage(sw *sseUsage) {
	switch {
	case sw.off:
		p.m.UsageRewrites.WithLabelValues("line_too_long").Inc()
	case sw.rewrites > 0:
		p.m.UsageRewrites.WithLabelValues("rewritten").Inc()
	default:
		p.m.UsageRewrites.WithLabelValues("unchanged").Inc()
	}
}

// relayJSON rewrites the usage of a non-streamed answer, read whole up to MaxResponseBytes;
// a larger answer is relayed unchanged.
func (p *Proxy) relayJSON(ctx context.Context, ex *exchange, resp *http.Response, u usageRewriter) {
	limit := p.cfg.MaxResponseBytes
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		if ctx.Err() != nil {
			p.m.ClientCancels.Inc()
			return
		}
		e := upstreamError(legDecode, reasonTransport)
		e.write(ex.w, ex.id)
		p.m.StreamAborts.Inc()
		return
	}
	h := ex.w.Header()
	if int64(len(body)) > limit {
		p.m.UsageRewrites.WithLabelValues("body_too_large").Inc()
		copyResponseHeader(h, resp.Header, true)
		ex.w.WriteHeader(resp.StatusCode)
		_, _ = ex.w.Write(body)
		bp := p.bufs.Get().(*[]byte)
		defer p.bufs.Put(bp)
		if _, err := io.CopyBuffer(ex.w, resp.Body, *bp); err != nil {
			p.abort(ctx, ex, err)
		}
		return
	}
	out, changed := u.rewriteJSON(body)
	if changed {
		p.m.UsageRewrites.WithLabelValues("rewritten").Inc()
	} else {
		p.m.UsageRewrites.WithLabelValues("unchanged").Inc()
	}
	copyResponseHeader(h, resp.Header, false)
	h.Set("Content-Length", strconv.Itoa(len(out)))
	ex.w.WriteHeader(resp.StatusCode)
	_, _ = ex.w.Write(out)
}

func isEventStream(h http.Header) bool {
	mt, _, err := mime.ParseMediaType(h.Get("Content-Type"))
	return err == nil && mt == "text/event-stream"
}
