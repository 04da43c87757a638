package extproc

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestClassifyTransfer: the rule of docs/disagg-truth.md §3.
func TestClassifyTransfer(t *testing.T) {
	for _, tc := range []struct {
		name           string
		spec           string
		hasUsage       bool
		prompt, cached int64
		reportsDetails bool
		sidecar        string
		want           TransferOutcome
	}{
		{"L-1_cached_is_transferred", "§3 rule 3, vLLM < 0.32 _update_waiting_for_remote_kv", true, 100, 99, false, sidecarPulled, TransferTransferred},
		{"whole_prompt_cached_is_transferred", "§3 rule 3, vLLM 0.32 reports L", true, 100, 100, false, sidecarPulled, TransferTransferred},
		{"one_token_prompt_zero_cached_is_transferred", "§3 rule 3 (L-1 = 0)", true, 1, 0, false, sidecarPulled, TransferTransferred},
		{"local_hit_only_is_recomputed", "§3 rule 4, invalid blocks truncated", true, 100, 64, false, sidecarPulled, TransferRecomputed},
		{"zero_cached_is_recomputed", "§3 rule 4", true, 100, 0, false, sidecarPulled, TransferRecomputed},
		{"absent_from_reporting_worker_is_recomputed", "§3 rule 5, vLLM < 0.32 omits 0", true, 100, -1, true, sidecarPulled, TransferRecomputed},
		{"absent_from_unseen_worker_is_unknown", "§3 rule 5", true, 100, -1, false, sidecarPulled, TransferUnknown},
		{"no_usage_is_unknown", "§3 rule 2, stream without include_usage", false, 0, -1, true, sidecarPulled, TransferUnknown},
		{"zero_prompt_is_unknown", "§3 rule 2", true, 0, 0, true, sidecarPulled, TransferUnknown},
		// vLLM 0.32 copies the prefill engine's hit into the decode answer when the decode leg
		// carries remote_prefill_cached_tokens: a fresh prompt transferred in full reports 0.
		// Only pd-sidecar's report (it removed the key) makes a low count mean recomputed.
		{"low_count_without_sidecar_is_unknown", "§3 rule 4", true, 361, 0, true, sidecarUnreported, TransferUnknown},
		{"prefill_hit_without_sidecar_is_unknown", "§3 rule 4", true, 361, 352, true, sidecarUnreported, TransferUnknown},
		{"full_count_without_sidecar_is_transferred", "§3 rule 3", true, 361, 361, true, sidecarUnreported, TransferTransferred},
		{"sidecar_failed_is_failed", "§3 rule 1, kv_load_failure_policy fail", true, 100, 0, true, sidecarFailed, TransferFailed},
		{"sidecar_failed_without_usage_is_failed", "§3 rule 1", false, 0, -1, false, sidecarFailed, TransferFailed},
		{"sidecar_fallback_is_recomputed", "§3 rule 1, prefill leg failed", true, 100, 0, true, sidecarFallback, TransferRecomputed},
		{"sidecar_rewritten_is_unknown", "§3 rule 1, --rewrite-usage", true, 100, 99, true, sidecarRewritten, TransferUnknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := classifyTransfer(tc.hasUsage, tc.prompt, tc.cached, tc.reportsDetails, tc.sidecar); got != tc.want {
				t.Fatalf("%s: got %s, want %s", tc.spec, got, tc.want)
			}
		})
	}
}

// TestTransferLogRing: the log keeps the newest records, newest first, and learns per decode
// worker that it reports cached_tokens.
func TestTransferLogRing(t *testing.T) {
	l := newTransferLog(3)
	if got := l.classify(TransferRecord{Decode: "d", PromptTokens: 10, CachedTokens: -1, Sidecar: sidecarPulled}, true); got != TransferUnknown {
		t.Fatalf("unseen worker without cached_tokens: %s", got)
	}
	l.classify(TransferRecord{Decode: "d", PromptTokens: 10, CachedTokens: 9, Sidecar: sidecarPulled}, true)
	if got := l.classify(TransferRecord{Decode: "d", PromptTokens: 10, CachedTokens: -1, Sidecar: sidecarPulled}, true); got != TransferRecomputed {
		t.Fatalf("reporting worker without cached_tokens: %s", got)
	}
	for i := range 2 {
		l.classify(TransferRecord{RequestID: fmt.Sprint("r", i), Decode: "e", PromptTokens: 10, CachedTokens: 9}, true)
	}
	got := l.latest(10)
	if len(got) != 3 || got[0].RequestID != "r1" || got[1].RequestID != "r0" || got[2].Outcome != TransferRecomputed {
		t.Fatalf("latest %+v", got)
	}
}

// TestTransferOutcomeCounted: a remote-prefill answer's usage is classified once per request
// and counted by prefill/decode pair (docs/disagg-truth.md §4).
func TestTransferOutcomeCounted(t *testing.T) {
	// One decode worker, so that the answer without cached_tokens comes from a worker that
	// reported them before.
	e := newEnv(t, envOptions{workers: defaultWorkers()[1:]})
	answer := func(streaming bool, usage, sidecar string) map[string]string {
		report := []string{}
		if sidecar != "" {
			report = []string{"x-condisagg-kv-transfer", sidecar, "x-condisagg-prefill-cached-tokens", "7"}
		}
		v := e.open(buffered, streamed)
		h := decideBuffered(t, v, chatBody("a question about transfers", streaming))
		if h[HeaderRoute] != "prefill" {
			t.Fatalf("route %s, want prefill", h[HeaderRoute])
		}
		if streaming {
			v.responseHeaders(false, append([]string{":status", "200", "content-type", "text/event-stream"}, report...)...)
			v.recv()
			body := sseToken
			if usage != "" {
				// continuous_usage_stats: a usage without details on a token chunk first.
				body = "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}],\"usage\":{\"prompt_tokens\":40,\"completion_tokens\":1}}\n\n" +
					"data: {\"choices\":[],\"usage\":" + usage + "}\n\n"
			}
			v.responseBody([]byte(body+"data: [DONE]\n\n"), true)
		} else {
			v.responseHeaders(false, append([]string{":status", "200", "content-type", "application/json"}, report...)...)
			v.recv()
			v.responseBody([]byte(`{"choices":[{"message":{"content":"x"},"finish_reason":"stop"}],"usage":`+usage+`}`), true)
		}
		v.recv()
		v.closeAndDrain()
		return h
	}
	full := `{"prompt_tokens":40,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":40}}`
	h := answer(false, full, "pulled")
	answer(true, full, "pulled") // the last usage counts
	answer(true, `{"prompt_tokens":40,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":16}}`, "pulled")
	answer(false, `{"prompt_tokens":40,"completion_tokens":2}`, "pulled") // vLLM < 0.32 omits a zero count
	answer(true, "", "pulled")                                            // no stream_options.include_usage
	// vLLM 0.32 without pd-sidecar's report: the count may be the prefill worker's hit.
	answer(false, `{"prompt_tokens":40,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":0}}`, "")
	// The decode worker failed to load the KV; the sidecar's local retry answered.
	answer(false, `{"prompt_tokens":40,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":0}}`, "failed")
	// The local retry after a failed load failed too: still a failed transfer.
	v := e.open(buffered, streamed)
	decideBuffered(t, v, chatBody("a question whose retry fails", false))
	v.responseHeaders(false, ":status", "500", "content-type", "application/json", "x-condisagg-kv-transfer", "failed")
	v.recv()
	v.responseBody([]byte(`{"error":{"message":"Internal server error"}}`), true)
	v.recv()
	v.closeAndDrain()
	recent := e.server.RecentTransfers(10)
	if got := recent[0]; got.Outcome != TransferFailed || got.PrefillCachedTokens != -1 {
		t.Fatalf("failed transfer whose retry failed recorded as %+v", got)
	}
	recent = recent[1:]
	if got := recent[0]; got.Outcome != TransferFailed || got.PrefillCachedTokens != 7 || got.Sidecar != "failed" {
		t.Fatalf("failed transfer recorded as %+v", got)
	}
	recent = recent[2:]
	pairs := map[[2]string]bool{}
	for _, r := range recent {
		if r.Prefill == "" || r.Decode == "" {
			t.Fatalf("record without a pair: %+v (headers %v)", r, h)
		}
		pairs[[2]string{r.Prefill, r.Decode}] = true
	}
	for outcome, want := range map[TransferOutcome]float64{TransferTransferred: 2, TransferRecomputed: 2, TransferUnknown: 2, TransferFailed: 2} {
		var got float64
		for pd := range pairs {
			got += testutil.ToFloat64(e.metrics.DisaggTransfers.WithLabelValues(pd[0], pd[1], string(outcome)))
		}
		if got != want || len(pairs) != 1 {
			t.Errorf("condisagg_disagg_transfers_total{outcome=%q} = %v over %v, want %v", outcome, got, pairs, want)
		}
	}
	if len(recent) != 5 || recent[0].Outcome != TransferUnknown || recent[4].Outcome != TransferTransferred || recent[4].RequestID != "req-1" {
		t.Fatalf("recent transfers %+v", recent)
	}
}
