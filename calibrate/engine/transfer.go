package engine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"time"

	"github.com/condisagg/condisagg/calibrate"
)

// The pd-sidecar's routing headers (ARCHITECTURE.md §2).
const (
	headerPrefillHost = "x-condisagg-prefill-host"
	headerDecodeHost  = "x-condisagg-decode-host"
)

// hostOf is the host:port of an http(s) URL, with the scheme's port when it names none.
func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return ""
	}
	if u.Port() != "" {
		return u.Host
	}
	port := "80"
	if u.Scheme == "https" {
		port = "443"
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// sidecarClient is the client of the transfer probes: completions go to the pd-sidecar in
// front of the prefill engine, which prefills at the prefill host and hands the KV to the
// decode engine (--endpoint), whose /metrics the probe reads.
func sidecarClient(cfg Config, d *client) *client {
	prefillHost := cfg.PrefillHost
	if prefillHost == "" {
		prefillHost = hostOf(cfg.PrefillEndpoint)
	}
	return &client{base: trimSlash(cfg.PrefillEndpoint), model: cfg.Model, http: d.http,
		headers: map[string]string{headerPrefillHost: prefillHost, headerDecodeHost: hostOf(cfg.Endpoint)}}
}

// metricsSettle bounds the wait for the decode engine's /metrics to count a transfer whose
// first token already arrived (vLLM updates its stats after the step that produced it).
const metricsSettle = 3 * time.Second

// transfer sends one fresh prompt of p.ISL tokens through the P/D pair and reads the decode
// engine's NixlConnector histograms before and after: the transfer's bytes, and its time as the
// change of the time sum over the change of the count (several ranks move their shards side
// by side).
func (r *runner) transfer(ctx context.Context, p calibrate.Probe) (calibrate.TransferSample, error) {
	if err := r.lim.WaitN(ctx, 2); err != nil { // the sidecar sends two requests: P, then D
		return calibrate.TransferSample{}, fmt.Errorf("request rate cap: %w", err)
	}
	before, err := r.c.nixl(ctx)
	if err != nil {
		return calibrate.TransferSample{}, err
	}
	s, err := r.pd.stream(ctx, time.Now(), prompt(r.rng, p.ISL), 1, nil)
	if err != nil {
		return calibrate.TransferSample{}, fmt.Errorf("through the pd-sidecar %s: %w", r.pd.base, err)
	}
	if s.kvTransfer != "pulled" && s.kvTransfer != "rewritten" {
		if st, err := r.c.nixl(ctx); err == nil && !st.present {
			return calibrate.TransferSample{}, fmt.Errorf("the pd-sidecar %s answered with X-Condisagg-KV-Transfer %q, and the engine %s %w",
				r.pd.base, s.kvTransfer, r.c.base, errNoNIXLMetrics)
		}
		return calibrate.TransferSample{}, fmt.Errorf("the pd-sidecar %s answered with X-Condisagg-KV-Transfer %q, not pulled: the KV did not move from %s to %s (a failed prefill leg or KV load; is --prefill-endpoint a pd-sidecar that allows both hosts?)",
			r.pd.base, s.kvTransfer, r.pd.headers[headerPrefillHost], r.pd.headers[headerDecodeHost])
	}
	after, err := r.settled(ctx, before)
	if err != nil {
		return calibrate.TransferSample{}, err
	}
	n := after.count - before.count
	return calibrate.TransferSample{ISL: p.ISL, Bytes: after.bytes - before.bytes, MS: 1e3 * (after.seconds - before.seconds) / n}, nil
}

// errNoNIXLMetrics names what the decode engine lacks.
var errNoNIXLMetrics = errors.New("has no vllm:nixl_xfer_time_seconds: the decode engine publishes NixlConnector stats only when started with --kv-transfer-config '{\"kv_connector\":\"NixlConnector\",\"kv_role\":\"kv_both\"}' and without --disable-log-stats")

// settled reads the decode engine's histograms until they count the transfer (an external
// process: polled, bounded by metricsSettle).
func (r *runner) settled(ctx context.Context, before nixlState) (nixlState, error) {
	deadline := time.Now().Add(metricsSettle)
	for {
		after, err := r.c.nixl(ctx)
		if err != nil {
			return nixlState{}, err
		}
		if after.count > before.count {
			return after, nil
		}
		if time.Now().After(deadline) {
			if !after.present {
				return nixlState{}, fmt.Errorf("calibrate: engine %s %w", r.c.base, errNoNIXLMetrics)
			}
			return nixlState{}, fmt.Errorf("calibrate: engine %s counted no KV transfer within %v of the answer (vllm:nixl_xfer_time_seconds_count stayed at %v)",
				r.c.base, metricsSettle, after.count)
		}
		select {
		case <-ctx.Done():
			return nixlState{}, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
