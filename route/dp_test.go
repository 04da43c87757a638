package route

import (
	"context"
	"testing"

	"github.com/condisagg/condisagg/policy"
	"github.com/condisagg/condisagg/pool"
)

// TestOutcomeNamesDataParallelRank: pool README "Data-parallel ranks" — every rank of a
// data_parallel_size server is a candidate of its own, and the outcome carries the chosen
// worker's rank and size for the header mutations, on decisions and fallbacks alike.
func TestOutcomeNamesDataParallelRank(t *testing.T) {
	ws := []pool.WorkerConfig{
		{Name: "p0", Role: pool.RolePrefill, Endpoint: "10.0.1.1:8000", MaxNumBatchedTokens: 8192, DataParallelSize: 2},
		{Name: "d0", Role: pool.RoleDecode, Endpoint: "10.0.2.1:8000", NumGPUBlocks: 10000, DataParallelSize: 2},
	}
	p, ix := testPoolAndIndex(t, ws)
	cfg := enabledConfig()
	r, err := New(Options{Index: ix, Pool: p, Policy: &cfg, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ranks := map[string]int{}
	for range 4 { // open fallbacks spread by load: two per rank
		out, err := r.Fallback(ctx, nil, policy.ReasonPassthrough)
		if err != nil {
			t.Fatal(err)
		}
		wantID := pool.RankID("d0", out.Decode.DPRank)
		if out.Decode.ID != wantID || out.Decode.DPSize != 2 || !out.Decode.Ranked() || out.Decode.Endpoint != "10.0.2.1:8000" {
			t.Fatalf("fallback decode %+v, want rank worker %s of size 2", out.Decode, wantID)
		}
		ranks[out.Decode.ID]++
	}
	if ranks["d0"] != 2 || ranks["d0/dp1"] != 2 {
		t.Fatalf("fallbacks per rank %v, want 2 and 2", ranks)
	}
	out, err := r.Decide(ctx, &Request{Tokens: prompt(6000)})
	if err != nil {
		t.Fatal(err)
	}
	if out.Route != policy.RoutePrefill {
		t.Fatalf("a long fresh prompt routed %s (%s), want the prefill route", out.Route, out.Reason)
	}
	if out.Prefill.DPSize != 2 || out.Prefill.ID != pool.RankID("p0", out.Prefill.DPRank) || out.Decode.DPSize != 2 {
		t.Fatalf("remote outcome prefill %+v decode %+v", out.Prefill, out.Decode)
	}
	if (Worker{ID: "x", Endpoint: "10.0.0.1:1"}).Ranked() || (Worker{DPSize: 1}).Ranked() {
		t.Fatal("a worker without data parallelism is ranked")
	}
}
