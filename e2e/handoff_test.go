package e2e

import (
	"fmt"
	"maps"
	"testing"

	condisaggv1 "github.com/condisagg/condisagg/proto/condisagg/v1"
)

// TestHandoffThroughEnvoy: the slo policy's handoff placement through the real Envoy, a
// pd-sidecar in front of each decode worker (decode first) and vllm-sim's NIXL flow. decode-0
// holds the prompt (a request sent straight to its engine), but under the decode-busy guard
// (0.4 of 400 blocks) it has no room to decode it; decode-1 is empty; the prefill worker would
// need the whole prompt's prefill, which breaks the 50 ms TTFT objective, as does a local
// prefill on decode-1. The handoff alone meets it: Envoy dials decode-1's sidecar, which sends
// the prefill leg (do_remote_decode) to decode-0's engine — a cache hit there — and the decode
// leg with decode-0's kv_transfer_params to decode-1's. Explain prices it, the decision header
// and the metrics name it, and every booking is released at the end.
func TestHandoffThroughEnvoy(t *testing.T) {
	s := startStack(t, Config{
		Disagg: `{"policy":"slo","cost_model":"llama3.1-8b-h100","slo_ttft_ms":50,"slo_tpot_ms":100,` +
			`"decode_busy_threshold":0.4,"slo_handoff":true}`,
		MaxBodyBytes: maxBodyBytes,
		Workers: []WorkerSpec{
			{Name: "prefill-0", Role: Prefill, MaxNumBatchedTokens: prefillMNBT},
			{Name: "decode-0", Role: Decode, NumGPUBlocks: 400, Sidecar: true},
			{Name: "decode-1", Role: Decode, NumGPUBlocks: 1000, Sidecar: true},
		},
	})
	ctx := scenarioCtx(t)

	body := ChatBody([]Message{{Role: "user", Content: Words(903, 3000)}}, maxTokens)
	holder := s.Worker("decode-0")
	warm, err := s.Post(ctx, "http://"+holder.SimAddr+"/v1/chat/completions", body, nil)
	if err != nil || warm.Status != 200 {
		t.Fatalf("warming decode-0 directly: %v %+v", err, warm)
	}
	ex := waitExplain(t, ctx, s, body, func(ex *condisaggv1.ExplainResponse) bool {
		return overlapOn(ex, "decode-0") >= 170 // more than the guard lets decode-0 take on
	})
	if ex.Route != "handoff" || ex.Reason != "slo_handoff" || ex.PrefillWorker != "decode-0" || ex.DecodeWorker != "decode-1" {
		t.Fatalf("explain: route %s reason %s prefill %s decode %s; want handoff from decode-0 to decode-1 (estimates %v)",
			ex.Route, ex.Reason, ex.PrefillWorker, ex.DecodeWorker, ex.GetInputs().GetEstimates())
	}
	var priced *condisaggv1.PlacementEstimate
	for _, e := range ex.GetInputs().GetEstimates() {
		if e.Placement == "handoff" {
			priced = e
		} else if e.Valid && e.Headroom >= 0 {
			t.Fatalf("%s meets the objective too (%v): the scenario does not isolate the handoff", e.Placement, e)
		}
	}
	if priced == nil || !priced.Valid || priced.PrefillWorker != "decode-0" || priced.DecodeWorker != "decode-1" ||
		priced.TransferTokens != ex.Tokens || priced.CachedTokens < 170*blockSize || priced.Headroom < 0 {
		t.Fatalf("explain's handoff forecast %v; want decode-0's cache, the whole prompt transferred, the objective met", priced)
	}

	r, delta := turn(t, ctx, s, body, nil, 2)
	wantDecision(t, r, "handoff", "slo_handoff")
	if !maps.Equal(delta, map[string]int{"decode-0": 1, "decode-1": 1}) {
		t.Fatalf("served by %v; want the prefill leg on decode-0 and the decode on decode-1", delta)
	}
	if got := r.Header.Get("X-Condisagg-Kv-Transfer"); got != "pulled" {
		t.Fatalf("x-condisagg-kv-transfer %q; want pulled (decode-1 loaded decode-0's KV)", got)
	}
	if got := r.Header.Get("X-Condisagg-Prefill-Cached-Tokens"); got == "" || got == "0" {
		t.Fatalf("x-condisagg-prefill-cached-tokens %q; want decode-0's prefix hit", got)
	}
	if v, err := s.RouterMetric(ctx, "condisagg_decisions_total", `route="handoff"`); err != nil || v != 1 {
		t.Fatalf("condisagg_decisions_total{route=handoff} = %g (%v); want 1", v, err)
	}
	err = Poll(ctx, func() error {
		ws, err := s.ListWorkers(ctx)
		if err != nil {
			return err
		}
		for _, w := range ws.Workers {
			if w.ActiveRequests != 0 || w.ActivePrefillTokens != 0 || w.ActiveDecodeBlocks != 0 {
				return fmt.Errorf("%s still holds load: %v", w.Id, w)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
