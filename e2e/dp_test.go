package e2e

import (
	"context"
	"strconv"
	"testing"

	condisaggv1 "github.com/condisagg/condisagg/proto/condisagg/v1"
)

// engineServed is how many requests each data-parallel engine of w's simulator has finished.
func engineServed(t *testing.T, ctx context.Context, s *Stack, w *Worker, ranks int) []int {
	t.Helper()
	out := make([]int, ranks)
	for r := range out {
		v, err := s.metric(ctx, "http://"+w.SimAddr+"/metrics", servedMetric, `engine="`+strconv.Itoa(r)+`"`)
		if err != nil {
			t.Fatal(err)
		}
		out[r] = int(v)
	}
	return out
}

// servedRank returns the one engine rank whose count grew by one between before and after.
func servedRank(t *testing.T, what string, before, after []int) int {
	t.Helper()
	rank := -1
	for r := range after {
		switch after[r] - before[r] {
		case 0:
		case 1:
			if rank >= 0 {
				t.Fatalf("%s: served by ranks %d and %d (%v -> %v)", what, rank, r, before, after)
			}
			rank = r
		default:
			t.Fatalf("%s: rank %d served %d requests (%v -> %v)", what, r, after[r]-before[r], before, after)
		}
	}
	if rank < 0 {
		t.Fatalf("%s: no rank served it (%v -> %v)", what, before, after)
	}
	return rank
}

// TestDataParallelWorkers: a prefill and a decode vllm-sim each run two data-parallel ranks
// behind one port (pool README "Data-parallel ranks"). Through the real Envoy and pd-sidecar, a
// conversation's long first turn goes remote; the decode engine rank that served it holds the
// prompt, condisagg indexes it under that rank's worker only (each rank has its own stream), and
// the next turn (sent twice) is pinned to that very rank with x-data-parallel-rank, where it hits
// the cache. Without the pin vllm-sim (like vLLM) balances back-to-back requests over its idle
// ranks in turn, so one of the two sends would land on the other rank.
func TestDataParallelWorkers(t *testing.T) {
	s := startStack(t, Config{Disagg: mainDisagg, MaxBodyBytes: maxBodyBytes,
		Workers: []WorkerSpec{
			{Name: "prefill-0", Role: Prefill, MaxNumBatchedTokens: prefillMNBT, DataParallelSize: 2},
			{Name: "decode-0", Role: Decode, NumGPUBlocks: decodeKVBlocks, DataParallelSize: 2},
		},
	})
	ctx := scenarioCtx(t)
	for _, id := range []string{"prefill-0", "prefill-0/dp1", "decode-0", "decode-0/dp1"} {
		waitWorker(t, ctx, s, id, "connected", func(w *condisaggv1.Worker) bool {
			return w.Id == id && w.GetEvents().GetConnected()
		})
	}
	p, d := s.Worker("prefill-0"), s.Worker("decode-0")
	for i, seed := range []uint64{701, 702} {
		msgs := []Message{{Role: "user", Content: Words(seed, 2200)}}
		pBefore, dBefore := engineServed(t, ctx, s, p, 2), engineServed(t, ctx, s, d, 2)
		r1, _ := turn(t, ctx, s, ChatBody(msgs, maxTokens), nil, 2)
		wantDecision(t, r1, "prefill", "remote_isl_too_long")
		servedRank(t, "turn 1 prefill leg", pBefore, engineServed(t, ctx, s, p, 2))
		dAfter := engineServed(t, ctx, s, d, 2)
		rank := servedRank(t, "turn 1 decode leg", dBefore, dAfter)
		ranked := []string{"decode-0", "decode-0/dp1"}
		mine, other := ranked[rank], ranked[1-rank]

		body2 := ChatBody(nextTurn(msgs, r1.Text, seed+1, 200), maxTokens)
		fullBlocks := int64(r1.Decision.ISL / blockSize)
		ex := waitExplain(t, ctx, s, body2, func(ex *condisaggv1.ExplainResponse) bool { return overlapOn(ex, mine) >= fullBlocks })
		if n := overlapOn(ex, other); n != 0 {
			t.Fatalf("conversation %d: %s holds %d blocks of a prompt rank %d served", i, other, n, rank)
		}
		if ex.Route != "decode" || ex.DecodeWorker != mine {
			t.Fatalf("conversation %d explain turn 2: route %s decode %s; want decode on %s", i, ex.Route, ex.DecodeWorker, mine)
		}
		// Sent twice: unpinned, two back-to-back requests on idle ranks would alternate.
		for k := range 2 {
			r2, _ := turn(t, ctx, s, body2, nil, 1)
			wantDecision(t, r2, "decode", "bypass_isl")
			now := engineServed(t, ctx, s, d, 2)
			if got := servedRank(t, "turn 2", dAfter, now); got != rank {
				t.Fatalf("conversation %d send %d: turn 2 ran on rank %d, want rank %d (x-data-parallel-rank)", i, k, got, rank)
			}
			dAfter = now
			if r2.CachedTokens < int(fullBlocks)*blockSize {
				t.Fatalf("conversation %d send %d: turn 2 reports %d cached tokens; want >= %d (turn 1's prompt on rank %d)", i, k, r2.CachedTokens, fullBlocks*blockSize, rank)
			}
		}
	}
}
