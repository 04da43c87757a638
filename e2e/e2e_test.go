package e2e

import (
	"maps"
	"net/http"
	"strings"
	"testing"

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

// TestEndToEnd runs the scenarios of issue 6 against one stack: Envoy (BUFFERED, fail-open)
// plus a fail-closed Envoy, condisagg, one prefill worker behind its pd-sidecar and two decode
// workers, all vllm-sim. Scenarios run in order; "condisagg down" is last.
func TestEndToEnd(t *testing.T) {
	s := startStack(t, Config{
		Disagg: mainDisagg, MaxBodyBytes: maxBodyBytes, FullDuplexEnvoy: true, ModelName: "qwen3",
		// Scenarios 3 and 10 pause the prefill worker to hold it busy; probing would (rightly)
		// find a hung worker and take it out. TestDeadDecodeWorkerLeavesSelection covers health.
		NoHealthProbes: true,
		Workers: []WorkerSpec{
			{Name: "prefill-0", Role: Prefill, MaxNumBatchedTokens: prefillMNBT},
			{Name: "decode-0", Role: Decode, NumGPUBlocks: decodeKVBlocks},
			{Name: "decode-1", Role: Decode, NumGPUBlocks: decodeKVBlocks},
		},
	})
	t.Run("1_multi_turn_bypass_on_D", func(t *testing.T) { testMultiTurn(t, s, s.Envoy, 101) })
	t.Run("1_multi_turn_full_duplex_profile", func(t *testing.T) { testMultiTurn(t, s, s.EnvoyDuplex, 111) })
	t.Run("2_short_fresh_prompt_remote_by_ratio", func(t *testing.T) { testShortFresh(t, s) })
	t.Run("3_prefill_load_saturation_and_drain", func(t *testing.T) { testPrefillLoad(t, s) })
	t.Run("4_decode_busy_guard", func(t *testing.T) { testDecodeBusy(t, s) })
	t.Run("6_publisher_restart", func(t *testing.T) { testPublisherRestart(t, s) })
	t.Run("7_forged_headers_ignored", func(t *testing.T) { testForgedHeaders(t, s) })
	t.Run("11_client_kv_transfer_params_and_encoded_paths", func(t *testing.T) { testHostileBodiesAndPaths(t, s) })
	t.Run("9_errors_through_envoy", func(t *testing.T) { testErrors(t, s) })
	t.Run("13_engine_control_members_on_every_path", func(t *testing.T) { testEngineControlEveryPath(t, s) })
	t.Run("14_exact_keys_and_bodies_vllm_accepts", func(t *testing.T) { testCaseVariantKeys(t, s) })
	t.Run("12_unknown_model_404", func(t *testing.T) { testUnknownModel(t, s) })
	t.Run("passthrough_get_models", func(t *testing.T) { testPassthrough(t, s) })
	t.Run("10_booked_load_returns_to_zero", func(t *testing.T) { testLoadReturnsToZero(t, s) })
	t.Run("8_condisagg_down_failure_mode", func(t *testing.T) { testRouterDown(t, s) })
}

// testMultiTurn: a long first turn goes prefill -> decode worker D (remote_isl_too_long); the
// next turn prefills locally on D (bypass_isl) and its stream is the answer D gives directly.
func testMultiTurn(t *testing.T, s *Stack, env *envoy.Process, seed uint64) {
	ctx := scenarioCtx(t)
	msgs := []Message{{Role: "user", Content: Words(seed, 2200)}}
	r1, delta := turnVia(t, ctx, s, env, ChatBody(msgs, maxTokens), nil, 2)
	wantDecision(t, r1, "prefill", "remote_isl_too_long")
	if r1.Decision.ISL < effISLThreshold || r1.Decision.EffISL != r1.Decision.ISL || r1.PromptTokens != r1.Decision.ISL {
		t.Fatalf("turn 1: decision %q, usage prompt_tokens %d; want a fresh prompt over %d tokens", r1.Decision.Raw, r1.PromptTokens, effISLThreshold)
	}
	d := remoteDecode(t, s, delta)
	// pd-sidecar reported the end of the prefill leg on the response headers, where condisagg
	// ended the prefill booking (condisagg_prefill_leg_seconds counts it).
	if n, err := s.metric(ctx, "http://"+s.AdminAddr+"/metrics", "condisagg_prefill_leg_seconds_count"); err != nil || n < 1 {
		t.Fatalf("condisagg_prefill_leg_seconds_count = %v (%v) after a remote request; want >= 1", n, err)
	}
	body2 := ChatBody(nextTurn(msgs, r1.Text, seed+1, 200), maxTokens)
	fullBlocks := int64(r1.Decision.ISL / blockSize)
	ex := waitExplain(t, ctx, s, body2, func(ex *condisaggv1.ExplainResponse) bool { return overlapOn(ex, d) >= fullBlocks })
	if ex.Route != "decode" || ex.Reason != "bypass_isl" || ex.DecodeWorker != d {
		t.Fatalf("explain turn 2: route %s reason %s decode %s; want decode bypass_isl on %s", ex.Route, ex.Reason, ex.DecodeWorker, d)
	}
	r2, delta := turnVia(t, ctx, s, env, body2, nil, 1)
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
	direct, err := s.Post(ctx, "http://"+s.Worker(d).SimAddr+"/v1/chat/completions",
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
	direct, err := s.Post(ctx, "http://"+s.Worker(d).SimAddr+"/v1/chat/completions",
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
