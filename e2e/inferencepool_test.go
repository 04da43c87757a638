package e2e

import (
	"context"
	"errors"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/condisagg/condisagg/envoy"
)

// TestInferencePoolGateway: condisagg as the endpoint picker of an InferencePool, behind real
// Envoys configured the way Gateway API Inference Extension gateways configure themselves
// (envoy.RenderPoolGateway: one route to the pool, ext_proc full duplex both ways with
// trailers, fail-closed, no condisagg routes and no header stripping). The picker contract of
// docs/proposals/004-endpoint-picker-protocol holds end to end:
//   - the destination in x-gateway-destination-endpoint and in envoy.lb metadata are equal and
//     are where Envoy sent the request, whether the gateway reads the header (ORIGINAL_DST) or
//     the metadata (override_host over the pool's endpoints);
//   - remote prefill and local prefill both work through the pool (a multi-turn conversation);
//   - a subset hint without the prefill worker keeps the request on the listed decode worker;
//     one that lists no worker is answered 503 subset_no_match;
//   - a client's forged destination never reaches its target.
func TestInferencePoolGateway(t *testing.T) {
	s := startStack(t, Config{
		Disagg: mainDisagg, MaxBodyBytes: maxBodyBytes, ModelName: "qwen3",
		// One loopback address per worker, as pods have: the subset hint matches by IP.
		Workers: []WorkerSpec{
			{Name: "prefill-0", Role: Prefill, MaxNumBatchedTokens: prefillMNBT, Host: "127.0.0.2"},
			{Name: "decode-0", Role: Decode, NumGPUBlocks: decodeKVBlocks, Host: "127.0.0.3"},
			{Name: "decode-1", Role: Decode, NumGPUBlocks: decodeKVBlocks, Host: "127.0.0.4"},
		},
	})
	// The pool's endpoints: pod IP x target port of every worker the picker may name (the
	// prefill worker's pd-sidecar, the decode workers' engines).
	var pool []envoy.Endpoint
	for _, w := range s.Workers {
		e, err := envoy.ParseEndpoint(w.Endpoint)
		if err != nil {
			t.Fatal(err)
		}
		pool = append(pool, e)
	}
	byHeader, hdrLog := startPoolGateway(t, s, "header", envoy.PoolGatewayParams{Selection: envoy.SelectByHeader})
	byMetadata, mdLog := startPoolGateway(t, s, "metadata", envoy.PoolGatewayParams{Selection: envoy.SelectByMetadata, PoolEndpoints: pool})

	t.Run("multi_turn_destination_by_header", func(t *testing.T) { testMultiTurn(t, s, byHeader, 301) })
	t.Run("multi_turn_destination_by_metadata", func(t *testing.T) { testMultiTurn(t, s, byMetadata, 311) })
	t.Run("subset_hint_without_prefill", func(t *testing.T) {
		d1 := s.Worker("decode-1")
		env, _ := startPoolGateway(t, s, "subset", envoy.PoolGatewayParams{SubsetHint: []string{d1.SimAddr}})
		ctx := scenarioCtx(t)
		// A fresh prompt over the threshold goes remote without a hint (multi_turn above); with
		// only decode-1 listed it prefills there.
		r, delta := turnVia(t, ctx, s, env, ChatBody([]Message{{Role: "user", Content: Words(321, 2200)}}, maxTokens), nil, 1)
		wantDecision(t, r, "decode", "no_prefill_workers")
		if len(delta) != 1 || delta["decode-1"] != 1 {
			t.Fatalf("served by %v; want only decode-1, the listed endpoint", delta)
		}
	})
	t.Run("subset_hint_matching_nothing", func(t *testing.T) {
		env, _ := startPoolGateway(t, s, "subset-none", envoy.PoolGatewayParams{SubsetHint: []string{"127.0.0.9:1"}})
		r, err := s.ChatVia(scenarioCtx(t), env, ChatBody([]Message{{Role: "user", Content: Words(331, 50)}}, maxTokens), nil)
		if err != nil {
			t.Fatal(err)
		}
		wantAPIError(t, r, 503, "subset_no_match", "subset")
	})
	t.Run("forged_destination_ignored", func(t *testing.T) {
		addr, hits := canary(t)
		ctx := scenarioCtx(t)
		r, _ := turnVia(t, ctx, s, byHeader, ChatBody([]Message{{Role: "user", Content: Words(341, 300)}}, maxTokens), forgedHeaders(addr), 2)
		wantDecision(t, r, "prefill", "remote_ratio_too_high")
		if n := hits.Load(); n != 0 {
			t.Fatalf("the canary a client named in x-gateway-destination-endpoint got %d requests", n)
		}
	})

	// Every request either gateway sent went to the endpoint condisagg named, which the header
	// and the metadata named alike, and which is a pool endpoint.
	ctx := scenarioCtx(t)
	for name, c := range map[string]struct {
		env  *envoy.Process
		log  string
		want int
	}{"header": {byHeader, hdrLog, 3}, "metadata": {byMetadata, mdLog, 2}} {
		lines := waitPoolLog(t, ctx, c.log, c.want)
		for _, l := range lines {
			if l.Code != "200" || l.Upstream != l.Header || l.Metadata != l.Header || s.WorkerAt(l.Upstream) == nil {
				t.Errorf("%s gateway: %+v; want 200 to the worker named by both the header and the envoy.lb metadata", name, l)
			}
		}
		poolCountersZero(t, ctx, c.env)
	}

	t.Run("condisagg_down", func(t *testing.T) { testPoolPickerDown(t, s, byHeader, pool) })
}

// testPoolPickerDown: what the pool's failureMode means with condisagg unreachable, through the
// gateway configurations above (docs/deploy.md §5d), as Envoy 1.40 does it. An inference request
// (a POST with a body) gets Envoy's 500 whatever the failure mode: in full duplex the body is
// already on its way to the picker when the stream fails, and Envoy then ignores
// failure_mode_allow. Only a bodyless request fails open: a gateway that picks among the pool's
// endpoints serves it on one of them, an ORIGINAL_DST gateway answers 503 without a destination
// header and dials the one a client sends, canary included.
func testPoolPickerDown(t *testing.T, s *Stack, closed *envoy.Process, pool []envoy.Endpoint) {
	openHeader, _ := startPoolGateway(t, s, "open-header", envoy.PoolGatewayParams{FailOpen: true})
	openMetadata, _ := startPoolGateway(t, s, "open-metadata", envoy.PoolGatewayParams{
		Selection: envoy.SelectByMetadata, PoolEndpoints: pool, FailOpen: true})
	ctx := scenarioCtx(t)
	s.Condisagg.Kill()
	body := ChatBody([]Message{{Role: "user", Content: Words(351, 300)}}, maxTokens)
	before, err := s.Served(ctx)
	if err != nil {
		t.Fatal(err)
	}
	addr, hits := canary(t)
	get := func(env *envoy.Process, hdr http.Header) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+env.ListenerAddr("llm")+"/v1/models", nil)
		if err != nil {
			t.Fatal(err)
		}
		maps.Copy(req.Header, hdr)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		return resp.StatusCode, string(b)
	}

	for name, env := range map[string]*envoy.Process{"FailClose": closed, "FailOpen metadata": openMetadata, "FailOpen header": openHeader} {
		for _, hdr := range []http.Header{nil, forgedHeaders(addr)} {
			r, err := s.ChatVia(ctx, env, body, hdr)
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != http.StatusInternalServerError {
				t.Fatalf("%s gateway, condisagg down, chat POST: %d %s; want Envoy's 500", name, r.Status, r.Body)
			}
		}
	}
	if code, b := get(closed, forgedHeaders(addr)); code != http.StatusInternalServerError {
		t.Fatalf("FailClose gateway, condisagg down, GET: %d %s; want 500", code, b)
	}
	if code, b := get(openMetadata, nil); code != http.StatusOK || !strings.Contains(b, `"qwen3"`) {
		t.Fatalf("FailOpen metadata gateway, condisagg down, GET /v1/models: %d %s; want a pool endpoint's 200", code, b)
	}
	if code, b := get(openHeader, nil); code != http.StatusServiceUnavailable || !strings.Contains(b, "no healthy upstream") {
		t.Fatalf("FailOpen ORIGINAL_DST gateway, GET without a destination: %d %s; want 503 no healthy upstream", code, b)
	}
	if hits.Load() != 0 {
		t.Fatalf("canary hit %d times before any gateway could dial it", hits.Load())
	}
	if code, _ := get(openHeader, forgedHeaders(addr)); code != http.StatusTeapot || hits.Load() != 1 {
		t.Fatalf("FailOpen ORIGINAL_DST gateway, GET with a forged destination: %d, canary hits %d; want the canary's 418", code, hits.Load())
	}
	// Envoy let exactly the bodyless requests pass unprocessed: one GET on the metadata
	// gateway, two on the header gateway.
	for env, want := range map[*envoy.Process]uint64{openMetadata: 1, openHeader: 2} {
		if n, err := env.Counter(ctx, "http.llm.ext_proc.failure_mode_allowed"); err != nil || n != want {
			t.Fatalf("failure_mode_allowed = %d (%v); want %d (the GETs only)", n, err, want)
		}
	}
	// No chat reached a worker: every engine served exactly what it had before.
	after, err := s.Served(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(before, after) {
		t.Fatalf("chat requests reached workers with condisagg down: %v -> %v", before, after)
	}
}

// startPoolGateway starts an Envoy configured as an InferencePool gateway in front of the
// stack's condisagg and returns it with its access log's path.
func startPoolGateway(t *testing.T, s *Stack, name string, p envoy.PoolGatewayParams) (*envoy.Process, string) {
	t.Helper()
	bin, err := envoy.FindBinary()
	if err != nil {
		t.Fatal(err)
	}
	if p.EPP, err = envoy.ParseEndpoint(s.GRPCAddr); err != nil {
		t.Fatal(err)
	}
	p.HealthCheckInterval = time.Second
	dir := filepath.Join(t.TempDir(), "envoy-pool-"+name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p.AccessLogPath = filepath.Join(dir, "access.log")
	path, err := envoy.WritePoolGateway(dir, p)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := envoy.Validate(ctx, bin, path); err != nil {
		t.Fatal(err)
	}
	env, err := envoy.Start(ctx, bin, path, envoy.StartOptions{StopTimeout: 3 * time.Second, FileFlushInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	// The picker's health check gates the cluster: wait until Envoy sees condisagg healthy.
	if err := Poll(ctx, func() error {
		n, err := env.Counter(ctx, "cluster.endpoint_picker.health_check.success")
		if err == nil && n == 0 {
			err = errors.New("no successful health check yet")
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return env, p.AccessLogPath
}

// waitPoolLog waits until a pool gateway's access log has at least n request lines.
func waitPoolLog(t *testing.T, ctx context.Context, path string, n int) []envoy.PoolAccessLine {
	t.Helper()
	var lines []envoy.PoolAccessLine
	if err := Poll(ctx, func() error {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if lines = envoy.ParsePoolAccessLog(b); len(lines) < n {
			return errors.New("access log incomplete")
		}
		return nil
	}); err != nil {
		t.Fatalf("%s: %v (%d lines)", path, err, len(lines))
	}
	return lines
}

// poolCountersZero checks a pool gateway's ext_proc error counters and the pool cluster's
// ORIGINAL_DST misses.
func poolCountersZero(t *testing.T, ctx context.Context, env *envoy.Process) {
	t.Helper()
	countersZero(t, ctx, env, "cluster.inference_pool.original_dst_host_invalid")
}
