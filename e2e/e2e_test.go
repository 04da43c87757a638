package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/condisagg/condisagg/envoy"
	condisaggv1 "github.com/condisagg/condisagg/proto/condisagg/v1"
)

// Main-stack parameters. θp·mnbt = 0.5·2048: the prefill worker is busy above 1024 booked
// uncached tokens. θd·kvcap = 0.8·400: a decode worker is busy above 320 projected blocks.
const (
	blockSize       = 16
	effISLThreshold = 2048
	prefillMNBT     = 2048
	decodeKVBlocks  = 400
	mainDisagg      = `{"policy":"isl_or_load","eff_isl_threshold":2048,"eff_isl_ratio_threshold":0.7,` +
		`"prefill_busy_threshold":0.5,"decode_busy_threshold":0.8}`
	maxBodyBytes = 1 << 20
	timeScale    = 20
	maxTokens    = 24
)

// scenarioTimeout bounds each scenario.
const scenarioTimeout = 45 * time.Second

func startStack(t *testing.T, cfg Config) *Stack {
	t.Helper()
	if testing.Short() {
		t.Skip("e2e: starts Envoy, condisagg and simulated workers; not in -short mode")
	}
	cfg.Bin, cfg.Dir, cfg.TimeScale = bin, t.TempDir(), timeScale
	if os.Getenv("E2E_VERBOSE") != "" {
		cfg.EnvoyLog = os.Stderr
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	s, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		if t.Failed() {
			t.Logf("condisagg output:\n%s", s.Condisagg.Output())
			t.Logf("envoy output:\n%s", s.Envoy.Output())
			for _, w := range s.Workers {
				t.Logf("%s output:\n%s", w.Sim.Name, w.Sim.Output())
				if w.Sidecar != nil {
					t.Logf("%s output:\n%s", w.Sidecar.Name, w.Sidecar.Output())
				}
			}
		}
	})
	return s
}

func scenarioCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), scenarioTimeout)
	t.Cleanup(cancel)
	return ctx
}

// TestEndToEnd runs the scenarios of issue 6 against one stack: Envoy (BUFFERED, fail-open)
// plus a fail-closed Envoy, condisagg, one prefill worker behind its pd-sidecar and two decode
// workers, all vllm-sim. Scenarios run in order; "condisagg down" is last.
func TestEndToEnd(t *testing.T) {
	s := startStack(t, Config{
		Disagg: mainDisagg, MaxBodyBytes: maxBodyBytes, FailClosedEnvoy: true,
		Workers: []WorkerSpec{
			{Name: "prefill-0", Role: Prefill, MaxNumBatchedTokens: prefillMNBT},
			{Name: "decode-0", Role: Decode, NumGPUBlocks: decodeKVBlocks},
			{Name: "decode-1", Role: Decode, NumGPUBlocks: decodeKVBlocks},
		},
	})
	t.Run("1_multi_turn_bypass_on_D", func(t *testing.T) { testMultiTurn(t, s) })
	t.Run("2_short_fresh_prompt_remote_by_ratio", func(t *testing.T) { testShortFresh(t, s) })
	t.Run("3_prefill_load_saturation_and_drain", func(t *testing.T) { testPrefillLoad(t, s) })
	t.Run("4_decode_busy_guard", func(t *testing.T) { testDecodeBusy(t, s) })
	t.Run("6_publisher_restart", func(t *testing.T) { testPublisherRestart(t, s) })
	t.Run("7_forged_headers_ignored", func(t *testing.T) { testForgedHeaders(t, s) })
	t.Run("9_errors_through_envoy", func(t *testing.T) { testErrors(t, s) })
	t.Run("passthrough_get_models", func(t *testing.T) { testPassthrough(t, s) })
	t.Run("10_booked_load_returns_to_zero", func(t *testing.T) { testLoadReturnsToZero(t, s) })
	t.Run("8_condisagg_down_failure_mode", func(t *testing.T) { testRouterDown(t, s) })
}

// turn sends one chat turn through Envoy and returns the answer and which workers finished a
// request for it (vllm-sim /metrics).
func turn(t *testing.T, ctx context.Context, s *Stack, body []byte, hdr http.Header, served int) (*Response, map[string]int) {
	t.Helper()
	before, err := s.Served(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.Chat(ctx, body, hdr)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != http.StatusOK {
		t.Fatalf("status %d, body %s", r.Status, r.Body)
	}
	if !r.Done || r.Text == "" || r.Events < 3 {
		t.Fatalf("stream incomplete: done=%v events=%d text=%q", r.Done, r.Events, r.Text)
	}
	delta, err := s.WaitServed(ctx, before, served)
	if err != nil {
		t.Fatal(err)
	}
	return r, delta
}

// wantDecision checks the decision header echoed on the response.
func wantDecision(t *testing.T, r *Response, route, reason string) {
	t.Helper()
	if r.Decision.Route != route || r.Decision.Reason != reason {
		t.Fatalf("decision %q; want route=%s reason=%s", r.Decision.Raw, route, reason)
	}
}

// remoteDecode checks that a remote-path request was served by the prefill worker and one
// decode worker, and returns the decode worker.
func remoteDecode(t *testing.T, s *Stack, delta map[string]int) string {
	t.Helper()
	d := ""
	for name, n := range delta {
		if w := s.Worker(name); w != nil && w.Spec.Role == Decode && n == 1 {
			d = name
		}
	}
	if len(delta) != 2 || delta["prefill-0"] != 1 || d == "" {
		t.Fatalf("served %v; want prefill-0 and one decode worker once each", delta)
	}
	return d
}

// waitExplain polls `condisagg explain` until ok accepts the answer (the router has applied
// the KV events of earlier turns), and returns it.
func waitExplain(t *testing.T, ctx context.Context, s *Stack, body []byte, ok func(*condisaggv1.ExplainResponse) bool) *condisaggv1.ExplainResponse {
	t.Helper()
	var ex *condisaggv1.ExplainResponse
	err := Poll(ctx, func() error {
		var err error
		if ex, err = s.Explain(ctx, body); err != nil {
			return err
		}
		if !ok(ex) {
			return fmt.Errorf("explain: not there yet: %v", ex)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ex
}

// waitWorker polls `condisagg workers` until ok accepts the named worker's state.
func waitWorker(t *testing.T, ctx context.Context, s *Stack, name, what string, ok func(*condisaggv1.Worker) bool) {
	t.Helper()
	err := Poll(ctx, func() error {
		w, err := s.WorkerStatus(ctx, name)
		if err != nil {
			return err
		}
		if !ok(w) {
			return fmt.Errorf("%s: not %s yet: %v", name, what, w)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func overlapOn(ex *condisaggv1.ExplainResponse, worker string) int64 {
	for _, o := range ex.Overlaps {
		if o.Worker == worker {
			return o.GpuBlocks
		}
	}
	return 0
}

func nextTurn(msgs []Message, answer string, seed uint64, words int) []Message {
	return append(append([]Message(nil), msgs...), Message{Role: "assistant", Content: answer},
		Message{Role: "user", Content: Words(seed, words)})
}

// testMultiTurn: a long first turn goes prefill -> decode worker D (remote_isl_too_long); the
// next turn prefills locally on D (bypass_isl) and its stream is the answer D gives directly.
func testMultiTurn(t *testing.T, s *Stack) {
	ctx := scenarioCtx(t)
	msgs := []Message{{Role: "user", Content: Words(101, 2200)}}
	r1, delta := turn(t, ctx, s, ChatBody(msgs, maxTokens), nil, 2)
	wantDecision(t, r1, "prefill", "remote_isl_too_long")
	if r1.Decision.ISL < effISLThreshold || r1.Decision.EffISL != r1.Decision.ISL || r1.PromptTokens != r1.Decision.ISL {
		t.Fatalf("turn 1: decision %q, usage prompt_tokens %d; want a fresh prompt over %d tokens", r1.Decision.Raw, r1.PromptTokens, effISLThreshold)
	}
	d := remoteDecode(t, s, delta)
	body2 := ChatBody(nextTurn(msgs, r1.Text, 102, 200), maxTokens)
	fullBlocks := int64(r1.Decision.ISL / blockSize)
	ex := waitExplain(t, ctx, s, body2, func(ex *condisaggv1.ExplainResponse) bool { return overlapOn(ex, d) >= fullBlocks })
	if ex.Route != "decode" || ex.Reason != "bypass_isl" || ex.DecodeWorker != d {
		t.Fatalf("explain turn 2: route %s reason %s decode %s; want decode bypass_isl on %s", ex.Route, ex.Reason, ex.DecodeWorker, d)
	}
	r2, delta := turn(t, ctx, s, body2, nil, 1)
	wantDecision(t, r2, "decode", "bypass_isl")
	if !maps.Equal(delta, map[string]int{d: 1}) {
		t.Fatalf("turn 2 served by %v; want only %s (local prefill on D)", delta, d)
	}
	if r2.Decision.OverlapBlocks < int(fullBlocks) || r2.Decision.EffISL >= effISLThreshold {
		t.Fatalf("turn 2 decision %q: want overlap >= %d blocks and eff_isl < %d", r2.Decision.Raw, fullBlocks, effISLThreshold)
	}
	if r2.CachedTokens < int(fullBlocks)*blockSize {
		t.Fatalf("turn 2: %s reports %d cached tokens; want >= %d (turn 1's prompt)", d, r2.CachedTokens, fullBlocks*blockSize)
	}
	// The stream through Envoy is exactly the answer D gives for the same prompt directly.
	direct, err := Post(ctx, "http://"+s.Worker(d).SimAddr+"/v1/chat/completions",
		[]byte(strings.Replace(string(body2), `"stream":true`, `"stream":false`, 1)), nil)
	if err != nil || direct.Status != http.StatusOK {
		t.Fatalf("direct request to %s: %v %+v", d, err, direct)
	}
	if direct.Text != r2.Text {
		t.Fatalf("streamed answer %q differs from %s's direct answer %q", r2.Text, d, direct.Text)
	}
}

// testShortFresh: a fresh prompt far below eff_isl_threshold still goes remote, because its
// ratio is 1.0 (strictly above 0.7).
func testShortFresh(t *testing.T, s *Stack) {
	ctx := scenarioCtx(t)
	body := ChatBody([]Message{{Role: "user", Content: Words(201, 300)}}, maxTokens)
	ex, err := s.Explain(ctx, body)
	if err != nil {
		t.Fatal(err)
	}
	if ex.Reason != "remote_ratio_too_high" || ex.Inputs.EffectiveIsl >= effISLThreshold || ex.Inputs.Ratio != 1 {
		t.Fatalf("explain: reason %s eff %d ratio %g; want remote_ratio_too_high, eff < %d, ratio 1",
			ex.Reason, ex.Inputs.EffectiveIsl, ex.Inputs.Ratio, effISLThreshold)
	}
	r, delta := turn(t, ctx, s, body, nil, 2)
	wantDecision(t, r, "prefill", "remote_ratio_too_high")
	if r.Decision.EffISL >= effISLThreshold || r.Decision.EffISL != r.Decision.ISL {
		t.Fatalf("decision %q: want eff_isl = isl < %d", r.Decision.Raw, effISLThreshold)
	}
	remoteDecode(t, s, delta)
	// The same rule for a non-streamed answer: one JSON body with the whole message.
	before, err := s.Served(ctx)
	if err != nil {
		t.Fatal(err)
	}
	plain := []byte(strings.Replace(string(ChatBody([]Message{{Role: "user", Content: Words(202, 300)}}, maxTokens)), `"stream":true`, `"stream":false`, 1))
	r, err = s.Chat(ctx, plain, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != http.StatusOK || r.Text == "" || r.PromptTokens != r.Decision.ISL {
		t.Fatalf("non-streamed: %d %s; want 200 with a message and usage", r.Status, r.Body)
	}
	wantDecision(t, r, "prefill", "remote_ratio_too_high")
	if delta, err = s.WaitServed(ctx, before, 2); err != nil {
		t.Fatal(err)
	}
	remoteDecode(t, s, delta)
}

// testPrefillLoad: with the prefill worker paused and a long remote request booked on it, a
// short fresh prompt bypasses (bypass_prefill_busy) and is served by a decode worker alone;
// once the prefill drains, the same kind of prompt goes remote again.
func testPrefillLoad(t *testing.T, s *Stack) {
	ctx := scenarioCtx(t)
	p := s.Worker("prefill-0")
	if err := p.Sim.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Sim.Resume() }) // whatever fails below
	type result struct {
		r   *Response
		err error
	}
	long := make(chan result, 1)
	go func() {
		r, err := s.Chat(ctx, ChatBody([]Message{{Role: "user", Content: Words(301, 2200)}}, maxTokens), nil)
		long <- result{r, err}
	}()
	budget := int64(prefillMNBT / 2)
	waitWorker(t, ctx, s, "prefill-0", "saturated", func(w *condisaggv1.Worker) bool { return w.ActivePrefillTokens > budget })
	probe := ChatBody([]Message{{Role: "user", Content: Words(302, 300)}}, maxTokens)
	ex, err := s.Explain(ctx, probe)
	if err != nil {
		t.Fatal(err)
	}
	if ex.Inputs.PrefillBusy != "true" || ex.Reason != "bypass_prefill_busy" {
		t.Fatalf("explain while saturated: prefill_busy %s reason %s; want true, bypass_prefill_busy", ex.Inputs.PrefillBusy, ex.Reason)
	}
	r, delta := turn(t, ctx, s, probe, nil, 1)
	wantDecision(t, r, "decode", "bypass_prefill_busy")
	if len(delta) != 1 || delta["prefill-0"] != 0 {
		t.Fatalf("bypass served by %v; want one decode worker", delta)
	}
	if err := p.Sim.Resume(); err != nil {
		t.Fatal(err)
	}
	res := <-long
	if res.err != nil {
		t.Fatal(res.err)
	}
	if res.r.Status != http.StatusOK || !res.r.Done {
		t.Fatalf("long request: status %d done %v body %s", res.r.Status, res.r.Done, res.r.Body)
	}
	wantDecision(t, res.r, "prefill", "remote_isl_too_long")
	waitWorker(t, ctx, s, "prefill-0", "drained", func(w *condisaggv1.Worker) bool { return w.ActivePrefillTokens == 0 })
	r, delta = turn(t, ctx, s, ChatBody([]Message{{Role: "user", Content: Words(303, 300)}}, maxTokens), nil, 2)
	wantDecision(t, r, "prefill", "remote_ratio_too_high")
	remoteDecode(t, s, delta)
}

// testDecodeBusy: the second turn of a conversation cached on D would bypass by the ISL rule,
// but it projects more than θd·kvcap blocks on D, so the guard sends it remote.
func testDecodeBusy(t *testing.T, s *Stack) {
	ctx := scenarioCtx(t)
	msgs := []Message{{Role: "user", Content: Words(401, 3900)}}
	r1, delta := turn(t, ctx, s, ChatBody(msgs, maxTokens), nil, 2)
	wantDecision(t, r1, "prefill", "remote_isl_too_long")
	d := remoteDecode(t, s, delta)
	body2 := ChatBody(nextTurn(msgs, r1.Text, 402, 1200), maxTokens)
	fullBlocks := int64(r1.Decision.ISL / blockSize)
	ex := waitExplain(t, ctx, s, body2, func(ex *condisaggv1.ExplainResponse) bool { return overlapOn(ex, d) >= fullBlocks })
	in := ex.Inputs
	limit := int64(0.8 * decodeKVBlocks)
	if ex.Reason != "remote_decode_busy" || ex.Gate != "bypass_denied_decode_busy" || in.PreviewDecode != d ||
		in.EffectiveIsl >= effISLThreshold || in.Ratio >= 0.7 || in.ProjectedDecodeBlocks <= limit || in.KvCapacityBlocks != decodeKVBlocks {
		t.Fatalf("explain turn 2: %v; want remote_decode_busy on %s with eff < %d, ratio < 0.7, projected > %d of %d",
			ex, d, effISLThreshold, limit, decodeKVBlocks)
	}
	r2, delta := turn(t, ctx, s, body2, nil, 2)
	wantDecision(t, r2, "prefill", "remote_decode_busy")
	remoteDecode(t, s, delta)
}

// testPublisherRestart: D's engine crashes and restarts on the same ports; the router clears
// D's index (no credit for blocks D lost), then rebuilds it from the new publisher's events
// and bypasses on D again.
func testPublisherRestart(t *testing.T, s *Stack) {
	ctx := scenarioCtx(t)
	msgs := []Message{{Role: "user", Content: Words(601, 2200)}}
	body1 := ChatBody(msgs, maxTokens)
	r1, delta := turn(t, ctx, s, body1, nil, 2)
	d := remoteDecode(t, s, delta)
	body2 := ChatBody(nextTurn(msgs, r1.Text, 602, 200), maxTokens)
	fullBlocks := int64(r1.Decision.ISL / blockSize)
	waitExplain(t, ctx, s, body2, func(ex *condisaggv1.ExplainResponse) bool {
		return ex.Reason == "bypass_isl" && ex.DecodeWorker == d && overlapOn(ex, d) >= fullBlocks
	})
	if err := s.RestartSim(ctx, d); err != nil {
		t.Fatal(err)
	}
	// D lost its cache: the router must stop crediting it.
	waitWorker(t, ctx, s, d, "cleared and reconnected", func(w *condisaggv1.Worker) bool {
		return w.IndexedGpuBlocks == 0 && w.GetEvents().GetConnected()
	})
	ex, err := s.Explain(ctx, body2)
	if err != nil {
		t.Fatal(err)
	}
	if ex.Route != "prefill" || overlapOn(ex, d) != 0 {
		t.Fatalf("explain after restart: route %s, overlap on %s %d; want remote, 0", ex.Route, d, overlapOn(ex, d))
	}
	// The restarted engine serves turn 1 again (directly) and publishes; the index follows.
	direct, err := Post(ctx, "http://"+s.Worker(d).SimAddr+"/v1/chat/completions",
		[]byte(strings.Replace(string(body1), `"stream":true`, `"stream":false`, 1)), nil)
	if err != nil || direct.Status != http.StatusOK {
		t.Fatalf("direct request to restarted %s: %v %+v", d, err, direct)
	}
	if direct.Text != r1.Text {
		t.Fatalf("restarted %s answers %q; want the same answer %q", d, direct.Text, r1.Text)
	}
	waitExplain(t, ctx, s, body2, func(ex *condisaggv1.ExplainResponse) bool {
		return ex.Reason == "bypass_isl" && ex.DecodeWorker == d && overlapOn(ex, d) >= fullBlocks
	})
	r2, delta := turn(t, ctx, s, body2, nil, 1)
	wantDecision(t, r2, "decode", "bypass_isl")
	if !maps.Equal(delta, map[string]int{d: 1}) {
		t.Fatalf("turn 2 after restart served by %v; want only %s", delta, d)
	}
}

// forgedHeaders aims every routing header of the contract at addr.
func forgedHeaders(addr string) http.Header {
	h := http.Header{}
	for _, k := range []string{"x-gateway-destination-endpoint", "x-condisagg-decode-host", "x-condisagg-prefill-host", "x-prefiller-host-port"} {
		h.Set(k, addr)
	}
	h.Set("x-condisagg-route", "decode")
	h.Set("x-bypass-remote-prefill", "true")
	h.Set("x-condisagg-decision", "route=decode;reason=bypass_isl")
	return h
}

// canary is an HTTP server that must never receive a request.
func canary(t *testing.T) (string, *atomic.Int64) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusTeapot)
	}))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String(), &hits
}

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
	res, err := Post(ctx, "http://"+s.Worker("prefill-0").Endpoint+"/v1/chat/completions",
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

type apiError struct {
	Error struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    string `json:"code"`
	} `json:"error"`
}

// wantAPIError checks an OpenAI-style error answered through Envoy.
func wantAPIError(t *testing.T, r *Response, status int, code, mention string) {
	t.Helper()
	var e apiError
	if r.Status != status || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") || json.Unmarshal(r.Body, &e) != nil {
		t.Fatalf("got %d %q %s; want %d with a JSON error body", r.Status, r.Header.Get("Content-Type"), r.Body, status)
	}
	if e.Error.Code != code || r.Header.Get("X-Condisagg-Error") != code || e.Error.Type == "" ||
		!strings.Contains(e.Error.Message, mention) {
		t.Fatalf("error %+v (x-condisagg-error %q); want code %s mentioning %q", e.Error, r.Header.Get("X-Condisagg-Error"), code, mention)
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
		t.Run(c.name, func(t *testing.T) {
			r, err := s.Chat(ctx, []byte(c.body), nil)
			if err != nil {
				t.Fatal(err)
			}
			wantAPIError(t, r, c.status, c.code, c.mention)
		})
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
	// Nothing went wrong between Envoy and condisagg on the way (envoy-extproc §7).
	for _, name := range []string{"http.llm.ext_proc.spurious_msgs_received", "http.llm.ext_proc.streams_failed",
		"http.llm.ext_proc.rejected_header_mutations", "http.llm.ext_proc.clear_route_cache_ignored",
		"http.llm.ext_proc.message_timeouts", "http.llm.ext_proc.failure_mode_allowed",
		"cluster.prefill.original_dst_host_invalid", "cluster.decode.original_dst_host_invalid"} {
		n, err := s.Envoy.Counter(ctx, name)
		if errors.Is(err, envoy.ErrNoStat) {
			continue
		}
		if err != nil || n != 0 {
			t.Errorf("envoy %s = %d (%v); want 0", name, n, err)
		}
	}
	if n, err := s.Envoy.Counter(ctx, "http.llm.ext_proc.streams_started"); err != nil || n == 0 {
		t.Errorf("envoy http.llm.ext_proc.streams_started = %d (%v); want > 0", n, err)
	}
}

// testPassthrough: a bodyless GET /v1/models goes through the router (passthrough) to a
// decode worker.
func testPassthrough(t *testing.T, s *Stack) {
	ctx := scenarioCtx(t)
	code, body, err := httpGet(ctx, s.URL("/v1/models"))
	if err != nil || code != http.StatusOK || !strings.Contains(string(body), `"qwen3"`) {
		t.Fatalf("GET /v1/models: %d %s (%v); want 200 listing qwen3", code, body, err)
	}
}

// testRouterDown: with condisagg killed, the fail-open Envoy serves through decode_fallback
// (one decode worker, local prefill, no decision header, forged headers still stripped) and
// the fail-closed Envoy answers 500.
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
	closed, err := Post(ctx, "http://"+s.EnvoyClosed.ListenerAddr("llm")+"/v1/chat/completions", body, forgedHeaders(addr))
	if err != nil {
		t.Fatal(err)
	}
	if closed.Status != http.StatusInternalServerError {
		t.Fatalf("fail-closed Envoy: %d %s; want 500", closed.Status, closed.Body)
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
// (condisagg_kv_events_silent_workers{pool="decode"} = 1, /readyz names it), and a second
// turn that would bypass with events goes remote with reason remote_no_kv_events.
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
	code, body, err := httpGet(ctx, "http://"+s.AdminAddr+"/readyz")
	if err != nil || code == http.StatusOK || !strings.Contains(string(body), "decode-0") {
		t.Fatalf("/readyz: %d %s (%v); want not ready, naming decode-0", code, body, err)
	}
	msgs := []Message{{Role: "user", Content: Words(501, 1500)}}
	r1, delta := turn(t, ctx, s, ChatBody(msgs, maxTokens), nil, 2)
	wantDecision(t, r1, "prefill", "remote_no_kv_events")
	remoteDecode(t, s, delta)
	r2, delta := turn(t, ctx, s, ChatBody(nextTurn(msgs, r1.Text, 502, 100), maxTokens), nil, 2)
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
