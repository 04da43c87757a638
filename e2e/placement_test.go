package e2e

import (
	"fmt"
	"maps"
	"testing"

	condisaggv1 "github.com/condisagg/condisagg/proto/condisagg/v1"
)

// TestSLOPlacementsThroughEnvoy: the slo policy's three placements through the real Envoy,
// pd-sidecar and vllm-sim. The decode worker's KV cache (64 blocks) cannot hold a 2,200-word
// prompt, so neither local prefill there nor a remote prefill into it fits: the whole request
// runs on the prefill worker (x-condisagg-route: prefill to Envoy's prefill cluster, the
// sidecar passing it to its own engine), which streams the answer and then holds the prompt.
// A short prompt on the idle fleet prefills locally on the decode worker. Every booking is
// released at the end.
func TestSLOPlacementsThroughEnvoy(t *testing.T) {
	s := startStack(t, Config{
		Disagg:       `{"policy":"slo","cost_model":"llama3.1-8b-h100","slo_ttft_ms":2000,"slo_tpot_ms":100}`,
		MaxBodyBytes: maxBodyBytes,
		Workers: []WorkerSpec{
			{Name: "prefill-0", Role: Prefill, MaxNumBatchedTokens: prefillMNBT},
			{Name: "decode-0", Role: Decode, NumGPUBlocks: 64},
		},
	})
	ctx := scenarioCtx(t)

	long := ChatBody([]Message{{Role: "user", Content: Words(901, 2200)}}, maxTokens)
	ex, err := s.Explain(ctx, long)
	if err != nil {
		t.Fatal(err)
	}
	if ex.Route != "prefill_local" || ex.Reason != "slo_prefill_local" || ex.PrefillWorker != "prefill-0" {
		t.Fatalf("explain: route %s reason %s prefill %s; want prefill_local on prefill-0", ex.Route, ex.Reason, ex.PrefillWorker)
	}
	if est := ex.GetInputs().GetEstimates(); len(est) != 3 || est[2].Placement != "prefill_local" || !est[2].Valid || est[0].Valid || est[1].Valid {
		t.Fatalf("explain estimates %v; want remote and decode without KV room, prefill_local valid", est)
	}
	r, delta := turn(t, ctx, s, long, nil, 1)
	wantDecision(t, r, "prefill_local", "slo_prefill_local")
	if !maps.Equal(delta, map[string]int{"prefill-0": 1}) {
		t.Fatalf("served by %v; want the prefill worker alone (it prefilled and decoded)", delta)
	}
	if r.PromptTokens != r.Decision.ISL {
		t.Fatalf("usage prompt_tokens %d; want the decision's isl %d", r.PromptTokens, r.Decision.ISL)
	}
	// The prefill worker's events now credit it with the prompt.
	full := int64(r.Decision.ISL / blockSize)
	waitExplain(t, ctx, s, long, func(ex *condisaggv1.ExplainResponse) bool { return overlapOn(ex, "prefill-0") >= full })

	short := ChatBody([]Message{{Role: "user", Content: Words(902, 100)}}, maxTokens)
	r2, delta := turn(t, ctx, s, short, nil, 1)
	wantDecision(t, r2, "decode", "slo_bypass")
	if !maps.Equal(delta, map[string]int{"decode-0": 1}) {
		t.Fatalf("short prompt served by %v; want decode-0 alone", delta)
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
