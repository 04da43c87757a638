package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/condisagg/condisagg/envoy"
)

// -envoy: every corpus request goes through a real Envoy with condisagg as its ext_proc
// (BUFFERED, fail-closed, the bootstrap of the envoy package), as a client of the router
// sends it. Envoy routes it to the engine condisagg chose (x-gateway-destination-endpoint,
// ORIGINAL_DST; x-data-parallel-rank for a rank). condisagg's answer carries its decision
// (debug_headers: x-condisagg-decision "…;isl=N;eff_isl=E;…"), so the cached tokens it
// credited to the request as routed, N−E, are compared with the engine's too, beside the
// Explain prediction made before sending.

// startEnvoy renders the bootstrap for condisagg's ext_proc port and starts Envoy.
func (d *driver) startEnvoy(ctx context.Context) error {
	bin, err := envoy.FindBinary()
	if err != nil {
		return err
	}
	p := envoy.Params{Mode: envoy.Buffered, FailOpen: envoy.FailClosed,
		ExtProc: envoy.Endpoint{Host: "127.0.0.1", Port: d.c.listen},
		Proxy:   envoy.Proxy{HealthCheckInterval: time.Second, AccessLogPath: filepath.Join(d.c.workdir, "envoy-access.log")}}
	path, err := envoy.WriteBootstrap(d.c.workdir, p)
	if err != nil {
		return err
	}
	out, err := os.Create(filepath.Join(d.c.workdir, "envoy.log"))
	if err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	e, err := envoy.Start(sctx, bin, path, envoy.StartOptions{Output: out, FileFlushInterval: time.Second})
	if err != nil {
		out.Close()
		return err
	}
	d.envoy, d.envoyOut = e, out
	v, _ := envoy.BinaryVersion(ctx, bin)
	d.envoyVersion = v
	fmt.Printf("envoy %s listening on %s\n", v, e.ListenerAddr("llm"))
	return d.waitEnvoyRouter(ctx)
}

func (d *driver) stopEnvoy() {
	if d.envoy != nil {
		_ = d.envoy.Stop()
		d.envoyOut.Close()
	}
}

// waitEnvoyRouter waits until Envoy's health check sees condisagg serving (at start, and
// after the router restart): fail-closed, Envoy would answer 503 until then.
func (d *driver) waitEnvoyRouter(ctx context.Context) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, err := d.envoy.Counter(ctx, "cluster.condisagg.membership_healthy")
		if err == nil && n == 1 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("envoy does not see condisagg healthy after 30s (membership_healthy %d, %v)", n, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// postEnvoy sends one corpus request through Envoy and returns the cached tokens condisagg
// credited to it as routed (from x-condisagg-decision) and its route.
func (d *driver) postEnvoy(ctx context.Context, path string, body []byte, out any) (routedCached int64, route string, err error) {
	url := "http://" + d.envoy.ListenerAddr("llm") + path
	h, err := d.postURL(ctx, url, body, nil, out)
	if err != nil {
		return 0, "", fmt.Errorf("through envoy: %w", err)
	}
	dec := h.Get("x-condisagg-decision")
	f := map[string]string{}
	for _, kv := range strings.Split(dec, ";") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			f[k] = v
		}
	}
	isl, err1 := strconv.ParseInt(f["isl"], 10, 64)
	eff, err2 := strconv.ParseInt(f["eff_isl"], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, "", fmt.Errorf("through envoy: the answer's x-condisagg-decision %q has no isl/eff_isl", dec)
	}
	return isl - eff, f["route"], nil
}

// envoyStats is what Envoy counted that would betray a request not routed as condisagg said.
func (d *driver) envoyStats(ctx context.Context) string {
	var parts []string
	for _, s := range []string{"http.llm.ext_proc.streams_started", "http.llm.ext_proc.streams_failed",
		"http.llm.ext_proc.failure_mode_allowed", "cluster.decode.upstream_rq_completed", "cluster.decode.original_dst_host_invalid"} {
		n, err := d.envoy.Counter(ctx, s)
		if err != nil {
			parts = append(parts, s+" ?")
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %d", s, n))
	}
	return strings.Join(parts, ", ")
}
