package e2e

import (
	"encoding/json"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// TestDisaggTruth: remote-prefill requests through Envoy, pd-sidecar and vllm-sim are counted
// by condisagg_disagg_transfers_total (docs/disagg-truth.md), with vllm-sim answering as vLLM
// 0.32 does: the prefill answer carries remote_prefill_cached_tokens, which pd-sidecar removes
// before the decode leg, so the decode worker reports its own count. decode-1 uses the
// transferred KV (transferred, the whole prompt cached); decode-0 fails every KV load under
// kv_load_failure_policy "recompute" (recomputed, only its own prefix hit cached); decode-2
// fails every load under vLLM's default "fail" (the engine answers 500; pd-sidecar has it
// prefill locally, the client still gets its answer, and the outcome is failed).
// `condisagg recent` (Admin Recent) shows the same outcome for each of those requests.
func TestDisaggTruth(t *testing.T) {
	s := startStack(t, Config{
		Disagg: mainDisagg, MaxBodyBytes: maxBodyBytes, ModelName: "qwen3",
		Workers: []WorkerSpec{
			{Name: "prefill-0", Role: Prefill, MaxNumBatchedTokens: prefillMNBT},
			{Name: "decode-0", Role: Decode, NumGPUBlocks: decodeKVBlocks, KVTransferFailureRate: 1, KVLoadFailurePolicy: "recompute"},
			{Name: "decode-1", Role: Decode, NumGPUBlocks: decodeKVBlocks},
			{Name: "decode-2", Role: Decode, NumGPUBlocks: decodeKVBlocks, KVTransferFailureRate: 1},
		},
	})
	ctx := scenarioCtx(t)
	want := map[string]map[string]float64{"decode-0": {}, "decode-1": {}, "decode-2": {}}
	var sent []string // each request's decode worker, oldest first
	outcome := map[string]string{"decode-0": "recomputed", "decode-1": "transferred", "decode-2": "failed"}
	missing := func() bool {
		return len(want["decode-0"]) == 0 || len(want["decode-1"]) == 0 || len(want["decode-2"]) == 0
	}
	for i := uint64(0); i < 18 && missing(); i++ {
		body := ChatBody([]Message{{Role: "user", Content: Words(900+i, 2200)}}, maxTokens)
		r, delta := turn(t, ctx, s, body, nil, 2)
		wantDecision(t, r, "prefill", "remote_isl_too_long")
		d := remoteDecode(t, s, delta)
		switch cached := r.CachedTokens; {
		case outcome[d] == "transferred" && cached != r.PromptTokens:
			t.Fatalf("request %d on %s: %d of %d prompt tokens cached; want the whole transferred prompt", i, d, cached, r.PromptTokens)
		case outcome[d] != "transferred" && cached != 0:
			t.Fatalf("request %d on %s (transfer fails): %d of %d prompt tokens cached; want 0 (a fresh prompt)", i, d, cached, r.PromptTokens)
		}
		want[d][outcome[d]]++
		sent = append(sent, d)
	}
	if missing() {
		t.Fatalf("requests did not reach every decode worker: %v", want)
	}
	t.Logf("requests by decode worker and outcome: %v", want)
	for d, byOutcome := range want {
		for _, o := range []string{"transferred", "recomputed", "failed", "unknown"} {
			got, err := s.metric(ctx, "http://"+s.AdminAddr+"/metrics", "condisagg_disagg_transfers_total",
				`prefill="prefill-0"`, `decode="`+d+`"`, `outcome="`+o+`"`)
			if err != nil || got != byOutcome[o] {
				t.Errorf("condisagg_disagg_transfers_total{decode=%q,outcome=%q} = %v (%v); want %v", d, o, got, err, byOutcome[o])
			}
		}
	}

	// `condisagg recent`, the built binary, shows each request's outcome, newest first. The
	// router classifies an answer when its response ends, so a last one may still be pending.
	type decision struct {
		Placement, DecodeWorker, Transfer string
		TransferPromptTokens              string
	}
	var got struct{ Decisions []decision }
	var out []byte
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		cmd := exec.CommandContext(ctx, bin.Condisagg, "recent", "--addr", s.AdminGRPC, "-n", strconv.Itoa(len(sent)), "-o", "json")
		var err error
		if out, err = cmd.Output(); err != nil {
			t.Fatalf("condisagg recent: %v\n%s", err, out)
		}
		got.Decisions = nil
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("condisagg recent -o json: %v\n%s", err, out)
		}
		pending := false
		for _, d := range got.Decisions {
			pending = pending || d.Transfer == "pending"
		}
		if !pending || time.Now().After(deadline) {
			break
		}
	}
	if len(got.Decisions) != len(sent) {
		t.Fatalf("condisagg recent: %d decisions, want %d:\n%s", len(got.Decisions), len(sent), out)
	}
	for i, d := range got.Decisions {
		w := sent[len(sent)-1-i]
		if d.Placement != "prefill" || d.DecodeWorker != w || d.Transfer != outcome[w] || d.TransferPromptTokens == "0" {
			t.Errorf("condisagg recent, decision %d (newest first): %+v; want prefill on %s, %s", i, d, w, outcome[w])
		}
	}
}
