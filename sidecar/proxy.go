package sidecar

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Request modes (the requests_total mode label).
const (
	modeRemote       = "remote"        // prefill at P, decode at D with P's kv_transfer_params
	modeFallback     = "fallback"      // prefill failed; D prefilled locally
	modePassthrough  = "passthrough"   // no prefill host (or not a completion path): straight to D
	modePrefillError = "prefill_error" // prefill failed and P's error went back to the client
	modeRejected     = "rejected"      // refused by the sidecar itself
)

// copyBufBytes is the size of the buffer that relays D's answer.
const copyBufBytes = 32 << 10

// Options are the injected collaborators of a Proxy. Metrics is required.
type Options struct {
	Metrics *Metrics
	Logger  *slog.Logger // default discards
}

// Proxy is the sidecar's http.Handler. It is safe for concurrent use; per-request state lives
// in an exchange on the serving goroutine.
type Proxy struct {
	cfg           Config
	allow         *Allowlist
	defaultDecode string            // canonical DefaultDecodeHost, or ""
	dial          map[string]string // canonical DialOverrides; immutable after New
	transport     *http.Transport
	m             *Metrics
	log           *slog.Logger
	bufs          sync.Pool // *[]byte of copyBufBytes, for relaying D's answer
}

// New validates cfg and builds a Proxy that dials only hosts in allow (and the default decode
// host). Close releases its idle connections.
func New(cfg Config, allow *Allowlist, opts Options) (*Proxy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if allow == nil || opts.Metrics == nil {
		return nil, errors.New("sidecar: New: allowlist and Options.Metrics are required")
	}
	cfg = cfg.withDefaults()
	p := &Proxy{cfg: cfg, allow: allow, m: opts.Metrics, log: opts.Logger}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	if cfg.DefaultDecodeHost != "" {
		p.defaultDecode, _ = canonicalHostPort(cfg.DefaultDecodeHost) // validated above
	}
	p.dial = make(map[string]string, len(cfg.DialOverrides))
	for k, v := range cfg.DialOverrides {
		ck, _ := canonicalHostPort(k) // validated above
		if _, ok := allow.Allowed(ck); !ok {
			return nil, fmt.Errorf("sidecar config: dial_overrides: %q is not in the allowlist", k)
		}
		p.dial[ck], _ = canonicalHostPort(v)
	}
	dialer := &net.Dialer{Timeout: cfg.ConnectTimeout, KeepAlive: 30 * time.Second}
	p.transport = &http.Transport{
		Proxy:                 nil, // never an environment proxy: the allowlist names the real peer
		DialContext:           dialer.DialContext,
		MaxIdleConns:          cfg.MaxIdleConnsPerHost * 16,
		MaxIdleConnsPerHost:   cfg.MaxIdleConnsPerHost,
		IdleConnTimeout:       90 * time.Second,
		DisableCompression:    true, // bytes pass through as D sent them
		ExpectContinueTimeout: 0,
	}
	p.bufs.New = func() any { b := make([]byte, copyBufBytes); return &b }
	p.m.AllowlistHosts.Set(float64(allow.Len()))
	return p, nil
}

// Close closes idle upstream connections.
func (p *Proxy) Close() { p.transport.CloseIdleConnections() }

// RunResolver re-resolves the allowlist's DNS names every interval until ctx is cancelled, and
// returns then. When the list holds only addresses it just waits for ctx.
func (p *Proxy) RunResolver(ctx context.Context, r Resolver, every time.Duration) {
	if !p.allow.hasNames() {
		<-ctx.Done()
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := p.allow.Resolve(ctx, r); err != nil && ctx.Err() == nil {
			p.m.ResolveFailures.Inc()
			p.log.Warn("allowlist resolve failed", "err", err)
		}
		p.m.AllowlistHosts.Set(float64(p.allow.Len()))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// exchange is the state of one client request.
type exchange struct {
	w       http.ResponseWriter
	r       *http.Request
	id      string      // X-Request-Id on both legs
	hdr     http.Header // outbound headers
	body    []byte
	prefill string // canonical host:port, "" = passthrough
	decode  string // canonical host:port
	// prefillRank and decodeRank are the workers' data-parallel ranks ("" = none), sent to
	// each leg as X-Data-Parallel-Rank.
	prefillRank, decodeRank string
}

// ServeHTTP serves /healthz itself and proxies everything else (see the package doc).
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/healthz" {
		w.WriteHeader(http.StatusOK)
		return
	}
	p.m.InFlight.Inc()
	defer p.m.InFlight.Dec()
	ex := &exchange{w: w, r: r, id: requestID(r.Header)}
	if e := p.route(ex); e != nil {
		p.reject(ex, e)
		return
	}
	body, e := p.readBody(w, r)
	if e != nil {
		p.reject(ex, e)
		return
	}
	ex.body = body
	ex.hdr = outboundHeader(r, ex.id)
	if ex.decodeRank != "" {
		ex.hdr[HeaderDPRank] = []string{ex.decodeRank}
	}
	ctx := r.Context()
	if ex.prefill == "" || r.Method != http.MethodPost || !isRemotePath(r.URL.Path) {
		p.passthrough(ctx, ex)
		return
	}
	p.remote(ctx, ex)
}

// route reads the routing headers and checks both hosts against the allowlist.
func (p *Proxy) route(ex *exchange) *apiError {
	h := ex.r.Header
	name := HeaderPrefillHost
	pv := h.Values(name)
	if len(pv) == 0 {
		name = HeaderPrefillerHostPort
		pv = h.Values(name)
	}
	switch len(pv) {
	case 0:
	case 1:
		c, ok := p.allow.Allowed(pv[0])
		if !ok {
			return errHostNotAllowed(name, pv[0])
		}
		ex.prefill = p.dialAddr(c)
	default:
		return errHostNotAllowed(name, fmt.Sprint(pv))
	}
	dv := h.Values(HeaderDecodeHost)
	switch len(dv) {
	case 0:
		if p.defaultDecode == "" {
			return errNoDecodeHost()
		}
		ex.decode = p.defaultDecode
	case 1:
		c, ok := p.allow.Allowed(dv[0])
		if !ok {
			return errHostNotAllowed(HeaderDecodeHost, dv[0])
		}
		ex.decode = p.dialAddr(c)
	default:
		return errHostNotAllowed(HeaderDecodeHost, fmt.Sprint(dv))
	}
	var e *apiError
	if ex.prefillRank, e = parseRank(h, HeaderPrefillRank); e != nil {
		return e
	}
	ex.decodeRank, e = parseRank(h, HeaderDecodeRank)
	return e
}

// dialAddr is the address dialled for an allowed host:port (DialOverrides, else itself).
func (p *Proxy) dialAddr(hostport string) string {
	if t, ok := p.dial[hostport]; ok {
		return t
	}
	return hostport
}

// readBody reads the whole client body, at most MaxBodyBytes.
func (p *Proxy) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *apiError) {
	limit := p.cfg.MaxBodyBytes
	if r.ContentLength > limit {
		return nil, errBodyTooLarge(limit)
	}
	size := int64(512)
	if r.ContentLength > 0 {
		size = r.ContentLength
	}
	buf := make([]byte, 0, size+1)
	body, err := readAllInto(buf, http.MaxBytesReader(w, r.Body, limit))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return nil, errBodyTooLarge(limit)
	case err != nil:
		return nil, errBodyRead()
	}
	return body, nil
}

func readAllInto(b []byte, r io.Reader) ([]byte, error) {
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}

func (p *Proxy) reject(ex *exchange, e *apiError) {
	p.m.Rejected.WithLabelValues(e.code).Inc()
	p.countRequest(modeRejected, e.status)
	p.log.Debug("request rejected", "request_id", ex.id, "reason", e.code)
	e.write(ex.w, ex.id)
}

// countRequest counts a request by mode and final status.
func (p *Proxy) countRequest(mode string, status int) {
	p.m.Requests.WithLabelValues(mode, strconv.Itoa(status)).Inc()
}

// passthrough sends the request to D as it is, except that a client-sent kv_transfer_params is
// removed (it would let a client steer D's KV pull).
func (p *Proxy) passthrough(ctx context.Context, ex *exchange) {
	body, stream := ex.body, false
	if len(body) > 0 {
		if obj, err := parseObject(body); err == nil {
			stream = isTrue(obj.last(keyStream))
			if obj.has(keyKVTransferParams) {
				body = localBody(obj)
				p.m.KVParamsRemoved.Inc()
			}
		}
	}
	p.decode(ctx, ex, body, stream, nil, modePassthrough)
}
