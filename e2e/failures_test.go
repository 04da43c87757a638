package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/condisagg/condisagg/envoy"
	condisaggv1 "github.com/condisagg/condisagg/proto/condisagg/v1"
)

// testForgedHeaders: client-sent routing headers aimed at a canary change nothing: the
// router's own decision is made and served; the sidecar refuses a forged host with 403.
func testForgedHeaders(t *testing.T, s *Stack) {
	ctx := scenarioCtx(t)
	addr, hits := canary(t)
	r, delta := turn(t, ctx, s, ChatBody([]Message{{Role: "user", Content: Words(701, 300)}}, maxTokens), forgedHeaders(addr), 2)
	wantDecision(t, r, "prefill", "remote_ratio_too_high")
	remoteDecode(t, s, delta)
	// Straight at the sidecar (no Envoy, no router): hosts outside the worker list get 403.
	h := forgedHeaders(addr)
	h.Set("x-condisagg-decode-host", s.Worker("decode-0").SimAddr)
	res, err := s.Post(ctx, "http://"+s.Worker("prefill-0").Endpoint+"/v1/chat/completions",
		ChatBody([]Message{{Role: "user", Content: "hi"}}, 4), h)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != http.StatusForbidden || res.Header.Get("X-Condisagg-Error") != "host_not_allowed" {
		t.Fatalf("sidecar with forged prefill host: %d %s %s; want 403 host_not_allowed", res.Status, res.Header.Get("X-Condisagg-Error"), res.Body)
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("canary received %d requests; want 0", n)
	}
}

// testErrors: malformed JSON and missing messages give 400 invalid_body, a body over
// max_body_bytes gives 413 body_too_large, as OpenAI-style JSON through Envoy, and reach no
// worker.
func testErrors(t *testing.T, s *Stack) {
	ctx := scenarioCtx(t)
	before, err := s.Served(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, body    string
		status        int
		code, mention string
	}{
		{"malformed_json", `{"model":"qwen3","messages":[{"role":"user","content":"hi"}`, 400, "invalid_body", "JSON"},
		{"no_messages", `{"model":"qwen3","max_tokens":4}`, 400, "invalid_body", "messages"},
		{"oversize", `{"model":"qwen3","messages":[{"role":"user","content":"` + strings.Repeat("a", maxBodyBytes+1024) + `"}]}`,
			413, "body_too_large", ""},
	} {
		for _, env := range []struct {
			name string
			p    *envoy.Process
		}{{"buffered", s.Envoy}, {"full_duplex", s.EnvoyDuplex}} {
			t.Run(c.name+"_"+env.name, func(t *testing.T) {
				r, err := s.ChatVia(ctx, env.p, []byte(c.body), nil)
				if err != nil {
					t.Fatal(err)
				}
				wantAPIError(t, r, c.status, c.code, c.mention)
			})
		}
	}
	after, err := s.Served(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(before, after) {
		t.Fatalf("rejected requests reached workers: %v -> %v", before, after)
	}
}

// testLoadReturnsToZero: a client that gives up on a request stuck in prefill frees its
// bookings, and once every stream has ended no worker holds booked load.
func testLoadReturnsToZero(t *testing.T, s *Stack) {
	ctx := scenarioCtx(t)
	p := s.Worker("prefill-0")
	if err := p.Sim.Pause(); err != nil {
		t.Fatal(err)
	}
	reqCtx, cancelReq := context.WithCancel(ctx)
	t.Cleanup(func() { cancelReq(); _ = p.Sim.Resume() }) // whatever fails below
	done := make(chan error, 1)
	go func() {
		_, err := s.Chat(reqCtx, ChatBody([]Message{{Role: "user", Content: Words(1001, 2200)}}, maxTokens), nil)
		done <- err
	}()
	waitWorker(t, ctx, s, "prefill-0", "booked", func(w *condisaggv1.Worker) bool { return w.ActivePrefillTokens > 0 })
	cancelReq()
	if err := <-done; err == nil {
		t.Errorf("cancelled request returned no error")
	}
	if err := p.Sim.Resume(); err != nil {
		t.Fatal(err)
	}
	var last *condisaggv1.ListWorkersResponse
	err := Poll(ctx, func() error {
		ws, err := s.ListWorkers(ctx)
		if err != nil {
			return err
		}
		last = ws
		for _, w := range ws.Workers {
			if w.ActiveRequests != 0 || w.ActivePrefillTokens != 0 || w.ActiveDecodeBlocks != 0 {
				return fmt.Errorf("%s still holds load: %v", w.Id, w)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%v\nworkers: %v", err, last)
	}
	if len(last.Workers) != 3 {
		t.Fatalf("workers: %v; want 3", last)
	}
	var indexed int64
	for _, w := range last.Workers {
		indexed += w.IndexedGpuBlocks
	}
	if indexed == 0 {
		t.Fatalf("no indexed blocks after the scenarios; the index outlives bookings: %v", last)
	}
	// Nothing went wrong between either Envoy and condisagg on the way (envoy-extproc §7).
	for _, env := range []*envoy.Process{s.Envoy, s.EnvoyDuplex} {
		envoyCountersZero(t, ctx, env)
	}
}

// envoyCountersZero checks Envoy's ext_proc error counters and the ORIGINAL_DST misses.
func envoyCountersZero(t *testing.T, ctx context.Context, env *envoy.Process) {
	t.Helper()
	countersZero(t, ctx, env, "http.llm.ext_proc.clear_route_cache_ignored",
		"cluster.prefill.original_dst_host_invalid", "cluster.decode.original_dst_host_invalid")
}

// countersZero checks that Envoy started ext_proc streams and that its ext_proc error
// counters, and the extra counters named, are all 0 (a counter Envoy does not have is skipped).
func countersZero(t *testing.T, ctx context.Context, env *envoy.Process, extra ...string) {
	t.Helper()
	names := append([]string{"http.llm.ext_proc.spurious_msgs_received", "http.llm.ext_proc.streams_failed",
		"http.llm.ext_proc.rejected_header_mutations", "http.llm.ext_proc.message_timeouts",
		"http.llm.ext_proc.failure_mode_allowed"}, extra...)
	for _, name := range names {
		n, err := env.Counter(ctx, name)
		if errors.Is(err, envoy.ErrNoStat) {
			continue
		}
		if err != nil || n != 0 {
			t.Errorf("envoy %s = %d (%v); want 0", name, n, err)
		}
	}
	if n, err := env.Counter(ctx, "http.llm.ext_proc.streams_started"); err != nil || n == 0 {
		t.Errorf("envoy http.llm.ext_proc.streams_started = %d (%v); want > 0", n, err)
	}
}

// testPassthrough: a bodyless GET /v1/models goes through the router (passthrough) to a
// decode worker.
func testPassthrough(t *testing.T, s *Stack) {
	ctx := scenarioCtx(t)
	code, body, err := s.Get(ctx, s.URL("/v1/models"))
	if err != nil || code != http.StatusOK || !strings.Contains(string(body), `"qwen3"`) {
		t.Fatalf("GET /v1/models: %d %s (%v); want 200 listing qwen3", code, body, err)
	}
}

// testRouterDown: with condisagg killed, the fail-open Envoy serves through decode_fallback
// (one decode worker, local prefill, no decision header, forged headers still stripped) and
// the fail-closed Envoy answers 503 with an OpenAI JSON error (its bare 500 mapped by the
// local reply config).
func testRouterDown(t *testing.T, s *Stack) {
	ctx := scenarioCtx(t)
	s.Condisagg.Kill()
	addr, hits := canary(t)
	body := ChatBody([]Message{{Role: "user", Content: Words(801, 300)}}, maxTokens)
	r, delta := turn(t, ctx, s, body, forgedHeaders(addr), 1)
	if r.Header.Get("x-condisagg-decision") != "" {
		t.Fatalf("decision header %q with condisagg down", r.Header.Get("x-condisagg-decision"))
	}
	if len(delta) != 1 || delta["prefill-0"] != 0 {
		t.Fatalf("fail-open served by %v; want one decode worker", delta)
	}
	if n, err := s.Envoy.Counter(ctx, "http.llm.ext_proc.failure_mode_allowed"); err != nil || n < 1 {
		t.Fatalf("failure_mode_allowed = %d (%v); want >= 1", n, err)
	}
	closed, err := s.Post(ctx, "http://"+s.EnvoyDuplex.ListenerAddr("llm")+"/v1/chat/completions", body, forgedHeaders(addr))
	if err != nil {
		t.Fatal(err)
	}
	var e struct {
		Error struct{ Type, Code string }
	}
	if closed.Status != http.StatusServiceUnavailable || json.Unmarshal(closed.Body, &e) != nil ||
		e.Error.Code != "router_unavailable" || e.Error.Type != "service_unavailable_error" {
		t.Fatalf("fail-closed Envoy: %d %s; want 503 with an OpenAI router_unavailable error", closed.Status, closed.Body)
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("canary received %d requests; want 0", n)
	}
}

// TestSilentAndMissingDecodeWorkers runs a stack whose only decode worker publishes no KV
// events (scenario 5), then loses it entirely (scenario 9, no eligible worker).
func TestSilentAndMissingDecodeWorkers(t *testing.T) {
	s := startStack(t, Config{
		Disagg: mainDisagg, ScrapeInterval: 200 * time.Millisecond,
		Workers: []WorkerSpec{
			{Name: "prefill-0", Role: Prefill, MaxNumBatchedTokens: prefillMNBT},
			{Name: "decode-0", Role: Decode, NumGPUBlocks: decodeKVBlocks, Silent: true},
		},
	})
	t.Run("5_silent_decode_worker", func(t *testing.T) { testSilent(t, s) })
	t.Run("9_no_eligible_worker", func(t *testing.T) { testNoWorkers(t, s) })
}

// testSilent: a decode worker whose event stream never comes up is flagged silent
// (condisagg_kv_events_silent_workers{pool="decode"} = 1; /readyz stays ready, since the
// worker serves, and names it as getting no cache credit), and a second turn that would bypass
// with events goes remote with reason remote_no_kv_events.
func testSilent(t *testing.T, s *Stack) {
	ctx := scenarioCtx(t)
	if err := Poll(ctx, func() error {
		v, err := s.RouterMetric(ctx, "condisagg_kv_events_silent_workers", `pool="decode"`)
		if err == nil && v != 1 {
			err = fmt.Errorf("silent decode workers = %g", v)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	code, body, err := s.Get(ctx, "http://"+s.AdminAddr+"/readyz")
	if err != nil || code != http.StatusOK || !strings.Contains(string(body), "decode-0 decode healthy (no KV event yet: no cache credit)") {
		t.Fatalf("/readyz: %d %s (%v); want ready, naming decode-0 as without cache credit", code, body, err)
	}
	msgs := []Message{{Role: "user", Content: Words(501, 1500)}}
	r1, delta := turn(t, ctx, s, ChatBody(msgs, maxTokens), nil, 2)
	wantDecision(t, r1, "prefill", "remote_no_kv_events")
	remoteDecode(t, s, delta)
	body2 := ChatBody(nextTurn(msgs, r1.Text, 502, 100), maxTokens)
	ex, err := s.Explain(ctx, body2)
	if err != nil {
		t.Fatal(err)
	}
	if ex.Reason != "remote_no_kv_events" || !ex.Inputs.Silent || ex.Inputs.OverlapBlocks != 0 {
		t.Fatalf("explain turn 2: reason %s silent %v overlap %d; want remote_no_kv_events, silent, 0", ex.Reason, ex.Inputs.Silent, ex.Inputs.OverlapBlocks)
	}
	r2, delta := turn(t, ctx, s, body2, nil, 2)
	wantDecision(t, r2, "prefill", "remote_no_kv_events")
	remoteDecode(t, s, delta)
	if r2.CachedTokens < (r1.Decision.ISL/blockSize)*blockSize {
		t.Fatalf("turn 2: decode-0 holds %d cached tokens; the bypass was possible but not taken only for lack of events", r2.CachedTokens)
	}
	if v, err := s.RouterMetric(ctx, "condisagg_decisions_total", `reason="remote_no_kv_events"`); err != nil || v < 2 {
		t.Fatalf("condisagg_decisions_total{reason=remote_no_kv_events} = %g (%v); want >= 2", v, err)
	}
}

// testNoWorkers: once the only decode worker is gone (its /metrics scrape fails), requests
// get 503 no_eligible_worker as OpenAI-style JSON through Envoy.
func testNoWorkers(t *testing.T, s *Stack) {
	ctx := scenarioCtx(t)
	s.Worker("decode-0").Sim.Kill()
	waitWorker(t, ctx, s, "decode-0", "unhealthy", func(w *condisaggv1.Worker) bool { return !w.Healthy })
	r, err := s.Chat(ctx, ChatBody([]Message{{Role: "user", Content: Words(901, 50)}}, maxTokens), nil)
	if err != nil {
		t.Fatal(err)
	}
	wantAPIError(t, r, http.StatusServiceUnavailable, "no_eligible_worker", "")
	if r.Header.Get("Retry-After") != "1" {
		t.Fatalf("503 without retry-after: 1 (%v)", r.Header)
	}
}

// testHostileBodiesAndPaths: a client's kv_transfer_params never reaches a worker, and a
// percent-encoded path is routed as the engine will read it. The second turn of a conversation
// bypasses to its decode worker directly (no sidecar rewrites the body on that route); it asks
// for do_remote_decode, which an engine honours by stopping after one token and handing out
// its KV. Through the BUFFERED and the full-duplex Envoy the answer is the full generation.
func testHostileBodiesAndPaths(t *testing.T, s *Stack) {
	for i, env := range []*envoy.Process{s.Envoy, s.EnvoyDuplex} {
		if env == nil {
			continue
		}
		ctx := scenarioCtx(t)
		seed := uint64(1101 + 10*i)
		msgs := []Message{{Role: "user", Content: Words(seed, 2200)}}
		r1, delta := turnVia(t, ctx, s, env, ChatBody(msgs, maxTokens), nil, 2)
		wantDecision(t, r1, "prefill", "remote_isl_too_long")
		d := remoteDecode(t, s, delta)
		body := ChatBody(nextTurn(msgs, r1.Text, seed+1, 200), maxTokens)
		waitExplain(t, ctx, s, body, func(ex *condisaggv1.ExplainResponse) bool { return ex.Route == "decode" && ex.DecodeWorker == d })
		smuggled := append(bytes.TrimSuffix(body, []byte("}")),
			`,"kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false,"remote_host":"10.9.9.9","remote_port":1}}`...)
		r, err := s.Post(ctx, "http://"+env.ListenerAddr("llm")+"/v1/chat/%63ompletions", smuggled, nil)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != http.StatusOK || r.Decision.Route != "decode" || r.Decision.Reason != "bypass_isl" {
			t.Fatalf("envoy %d: encoded path, smuggled params: %d decision %q; want a bypass on %s", i, r.Status, r.Decision.Raw, d)
		}
		if bytes.Contains(r.Body, []byte("kv_transfer_params")) || r.Events < maxTokens/2 {
			t.Fatalf("envoy %d: the decode worker acted on the client's kv_transfer_params: %d events\n%s", i, r.Events, r.Body)
		}
	}
	if v, err := s.RouterMetric(scenarioCtx(t), "condisagg_request_fields_stripped_total", `field="kv_transfer_params"`); err != nil || v < 1 {
		t.Fatalf("condisagg_request_fields_stripped_total = %g (%v)", v, err)
	}
}

// TestDeadDecodeWorkerLeavesSelection: a decode worker killed with -9 leaves selection within
// 2 s with the default health settings (probing /health), no decision picks it afterwards,
// requests keep succeeding through Envoy, and the restarted worker comes back by itself.
func TestDeadDecodeWorkerLeavesSelection(t *testing.T) {
	s := startStack(t, Config{
		Disagg: mainDisagg,
		Workers: []WorkerSpec{
			{Name: "prefill-0", Role: Prefill, MaxNumBatchedTokens: prefillMNBT},
			{Name: "decode-0", Role: Decode, NumGPUBlocks: decodeKVBlocks},
			{Name: "decode-1", Role: Decode, NumGPUBlocks: decodeKVBlocks},
		},
	})
	ctx := scenarioCtx(t)
	killed := time.Now()
	s.Worker("decode-1").Sim.Kill()
	waitWorker(t, ctx, s, "decode-1", "unhealthy", func(w *condisaggv1.Worker) bool { return !w.Healthy })
	detect := time.Since(killed)
	t.Logf("decode-1 left selection %v after kill -9", detect.Round(10*time.Millisecond))
	if detect > 2*time.Second+500*time.Millisecond { // 2 s budget; the poll adds up to its interval
		t.Fatalf("dead decode worker still selectable %v after the kill; want within 2 s", detect)
	}
	for i := range 30 {
		ex, err := s.Explain(ctx, ChatBody([]Message{{Role: "user", Content: Words(uint64(1200+i), 40+i)}}, maxTokens))
		if err != nil {
			t.Fatal(err)
		}
		if ex.DecodeWorker == "decode-1" {
			t.Fatalf("decision %d picked the dead decode-1 (%s/%s)", i, ex.Route, ex.Reason)
		}
	}
	for i := range 3 {
		r, err := s.Chat(ctx, ChatBody([]Message{{Role: "user", Content: Words(uint64(1300+i), 60)}}, maxTokens), nil)
		if err != nil || r.Status != http.StatusOK {
			t.Fatalf("request %d with decode-1 dead: %v %+v", i, err, r)
		}
	}
	restarted := time.Now()
	if err := s.RestartSim(ctx, "decode-1"); err != nil {
		t.Fatal(err)
	}
	waitWorker(t, ctx, s, "decode-1", "healthy again", func(w *condisaggv1.Worker) bool { return w.Healthy })
	t.Logf("decode-1 back %v after its restart", time.Since(restarted).Round(10*time.Millisecond))
}

// testUnknownModel: a request for a model the router does not serve (unknown_model reject)
// gets vLLM's own 404 JSON through both Envoys, with x-condisagg-error unknown_model, and
// reaches no worker.
func testUnknownModel(t *testing.T, s *Stack) {
	ctx := scenarioCtx(t)
	before, err := s.Served(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := "{\"error\":{\"message\":\"The model `gpt-4o` does not exist.\",\"type\":\"NotFoundError\",\"param\":\"model\",\"code\":404}}"
	for _, env := range []*envoy.Process{s.Envoy, s.EnvoyDuplex} {
		r, err := s.ChatVia(ctx, env, []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`), nil)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != http.StatusNotFound || string(r.Body) != want || r.Header.Get("X-Condisagg-Error") != "unknown_model" ||
			!strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
			t.Fatalf("unknown model: %d %q %q %s; want 404 %s", r.Status, r.Header.Get("Content-Type"),
				r.Header.Get("X-Condisagg-Error"), r.Body, want)
		}
	}
	after, err := s.Served(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(before, after) {
		t.Fatalf("an unknown model's request reached workers: %v -> %v", before, after)
	}
}
