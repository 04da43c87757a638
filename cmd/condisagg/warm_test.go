package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/condisagg/condisagg/internal/testport"
	condisaggv1 "github.com/condisagg/condisagg/proto/condisagg/v1"
)

// warmBufferSteps is the vllm-sim's replay buffer in the warm-start test: far fewer batches
// than the test publishes before the second replica starts, so a cold start (a replay from
// seq 0) cannot rebuild the peer's index, and only a warm start can match it.
const warmBufferSteps = 40

// startWarmSim runs a one-rank vllm-sim publishing KV events on pub with a replay buffer of
// warmBufferSteps batches on rep.
func startWarmSim(t *testing.T, model string, pub, rep int) string {
	t.Helper()
	c := simConfig(t, model, fmt.Sprintf("tcp://*:%d", pub), "kv")
	repEP := fmt.Sprintf("tcp://*:%d", rep)
	c.KVEvents.ReplayEndpoint, c.KVEvents.BufferSteps = &repEP, warmBufferSteps
	addr, _ := runSim(t, c, "127.0.0.1:0")
	return addr
}

// warmServeConfig is serve's test config with KV events on and the one decode worker at
// simAddr, plus extra lines.
func warmServeConfig(model, simAddr string, pub, rep int, extra string) string {
	cfg := strings.Replace(serveYAML, "MODEL", model, 1)
	return strings.Replace(cfg, "kv_events: false", "kv_events: true", 1) + fmt.Sprintf(`workers:
  - {name: decode-0, role: decode, endpoint: %s, num_gpu_blocks: 1000,
     kv_events: "tcp://127.0.0.1:%d", kv_replay: "tcp://127.0.0.1:%d"}
`, simAddr, pub, rep) + extra
}

// warmPrompt is the chat body of request i: words distinct per request, n repetitions.
func warmPrompt(i, n int) string {
	return `{"model":"qwen3","max_tokens":1,"messages":[{"role":"user","content":"` +
		strings.Repeat(fmt.Sprintf("topic%d ", i), n) + `"}]}`
}

// indexedBlocks returns the GPU blocks a router indexes per worker.
func indexedBlocks(t *testing.T, ctx context.Context, c condisaggv1.AdminClient) map[string]int64 {
	t.Helper()
	lw, err := c.ListWorkers(ctx, &condisaggv1.ListWorkersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, w := range lw.Workers {
		out[w.Id] = w.IndexedGpuBlocks
	}
	return out
}

// overlaps returns the GPU overlap Explain credits each worker with for each body.
func overlaps(t *testing.T, ctx context.Context, c condisaggv1.AdminClient, bodies []string) []string {
	t.Helper()
	var out []string
	for _, b := range bodies {
		r, err := c.Explain(ctx, &condisaggv1.ExplainRequest{Path: "/v1/chat/completions", Body: []byte(b)})
		if err != nil {
			t.Fatal(err)
		}
		s := ""
		for _, o := range r.Overlaps {
			s += fmt.Sprintf("%s:%d ", o.Worker, o.GpuBlocks)
		}
		out = append(out, s)
	}
	return out
}

// metricValue reads one unlabelled sample from the router's /metrics.
func metricValue(t *testing.T, httpAddr, name string) string {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v
		}
	}
	return ""
}

// TestServeWarmStartFromPeer: a second replica started with replicas.warm_from copies the
// running replica's index and resumes the engine's event stream right after the batch that
// index ends at, while the engine keeps publishing during the copy. Afterwards, with enough
// further traffic to evict every block stored around the copy (so a batch applied twice would
// leave a block behind, and one lost would miss one), both replicas index exactly the same
// blocks and Explain credits the same overlaps. The engine retains too few batches for a cold
// start to rebuild the index: a replica whose peer is down starts cold, says so
// (condisagg_warm_start 0), and indexes fewer blocks.
func TestServeWarmStartFromPeer(t *testing.T) {
	model := requireModel(t)
	pub, rep := testport.Block(t, 1), testport.Block(t, 1)
	simAddr := startWarmSim(t, model, pub, rep)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	a := startServe(t, warmServeConfig(model, simAddr, pub, rep, ""))
	ca := adminClient(t, a)
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			select {
			case <-ctx.Done():
				t.Fatalf("%s: not reached", what)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	// Wait for A's stream before the engine publishes: A must see every batch.
	waitFor("peer stream connected", func() bool {
		lw, err := ca.ListWorkers(ctx, &condisaggv1.ListWorkersRequest{})
		return err == nil && len(lw.Workers) == 1 && lw.Workers[0].GetEvents().GetConnected()
	})
	var bodies []string
	for i := range 60 { // 60 requests of a few blocks: more batches than the engine retains, no eviction yet
		bodies = append(bodies, warmPrompt(i, 30))
		chatToRank(t, ctx, simAddr, bodies[i], "0")
	}
	waitFor("peer indexed the first requests", func() bool { return indexedBlocks(t, ctx, ca)["decode-0"] > 200 })

	// Traffic during the copy: the engine publishes while B fetches and imports.
	var wg sync.WaitGroup
	during := make(chan struct{})
	wg.Go(func() {
		for i := 60; i < 90; i++ {
			select {
			case <-during:
				return
			default:
			}
			chatToRank(t, ctx, simAddr, warmPrompt(i, 30), "0")
		}
	})
	b := startServe(t, warmServeConfig(model, simAddr, pub, rep, "replicas: {warm_from: \""+a.adminGRPC+"\"}\n"))
	close(during)
	wg.Wait()
	cb := adminClient(t, b)
	if v := metricValue(t, b.http, "condisagg_warm_start"); v != "1" {
		t.Fatalf("condisagg_warm_start = %q; want 1", v)
	}
	if v := metricValue(t, b.http, "condisagg_warm_start_blocks"); v == "" || v == "0" {
		t.Fatalf("condisagg_warm_start_blocks = %q; want the copied blocks", v)
	}
	t.Logf("time to warm %ss, %s blocks copied", metricValue(t, b.http, "condisagg_warm_start_seconds"), metricValue(t, b.http, "condisagg_warm_start_blocks"))
	lastSeq := func(cl condisaggv1.AdminClient) (uint64, bool) {
		lw, err := cl.ListWorkers(ctx, &condisaggv1.ListWorkersRequest{})
		if err != nil || len(lw.Workers) != 1 {
			return 0, false
		}
		ev := lw.Workers[0].GetEvents()
		return ev.GetLastSeq(), ev.GetHasLastSeq()
	}
	caughtUp := func(cl condisaggv1.AdminClient) func() bool {
		return func() bool {
			sa, _ := lastSeq(ca)
			sx, ok := lastSeq(cl)
			return ok && sx == sa
		}
	}
	// Before any eviction: B holds exactly A's blocks, so nothing published before or during
	// the copy was lost (the engine's 40 retained batches alone could not give them).
	waitFor("warm replica caught up", caughtUp(cb))
	// It resumed after the snapshot's batch: a replay whose check passed, no history lost, no
	// clear (a failed check would clear with resume_mismatch and warm up from seq 0).
	if lw, err := cb.ListWorkers(ctx, &condisaggv1.ListWorkersRequest{}); err != nil || lw.Workers[0].GetEvents().GetReplays() == 0 ||
		lw.Workers[0].GetEvents().GetReplaysLost() != 0 {
		t.Fatalf("warm replica's stream: %v %v; want a replay (the resume) and none lost", lw.GetWorkers(), err)
	}
	if v := metricValue(t, b.http, `condisagg_kv_stream_clears_total{reason="resume_mismatch",worker="decode-0"}`); v != "" && v != "0" {
		t.Fatalf("warm replica cleared its stream on resume (%s)", v)
	}
	if ia, ib := indexedBlocks(t, ctx, ca), indexedBlocks(t, ctx, cb); fmt.Sprint(ia) != fmt.Sprint(ib) {
		t.Fatalf("after the copy: peer indexes %v, warm replica %v", ia, ib)
	}
	if oa, ob := overlaps(t, ctx, ca, bodies), overlaps(t, ctx, cb, bodies); strings.Join(oa, "|") != strings.Join(ob, "|") {
		t.Fatalf("after the copy: overlaps differ:\n peer %v\n warm %v", oa, ob)
	}

	// Peer down: cold start, and the short replay buffer cannot rebuild what A holds.
	dead := testport.Block(t, 1)
	c := startServe(t, warmServeConfig(model, simAddr, pub, rep, fmt.Sprintf("replicas: {warm_from: \"127.0.0.1:%d\", warm_timeout: 2s}\n", dead)))
	cc := adminClient(t, c)
	if v := metricValue(t, c.http, "condisagg_warm_start"); v != "0" {
		t.Fatalf("peer down: condisagg_warm_start = %q; want 0", v)
	}
	waitFor("cold replica replayed what the engine retains", caughtUp(cc))
	if ic, ia := indexedBlocks(t, ctx, cc), indexedBlocks(t, ctx, ca); ic["decode-0"] >= ia["decode-0"] {
		t.Errorf("cold replica indexes %v, the peer %v: a cold start should not rebuild the peer's index from %d retained batches", ic, ia, warmBufferSteps)
	} else {
		t.Logf("cold replica (peer down) indexes %v, the peer %v", ic, ia)
	}

	// Enough long requests to evict everything stored so far (1000 blocks of capacity).
	for i := range 30 {
		body := warmPrompt(1000+i, 400)
		bodies = append(bodies, body)
		chatToRank(t, ctx, simAddr, body, "0")
	}
	probe := append(bodies[:5:5], bodies[len(bodies)-5:]...)
	var ia, ib map[string]int64
	var oa, ob []string
	waitFor("both replicas index the same blocks", func() bool {
		ia, ib = indexedBlocks(t, ctx, ca), indexedBlocks(t, ctx, cb)
		oa, ob = overlaps(t, ctx, ca, probe), overlaps(t, ctx, cb, probe)
		return fmt.Sprint(ia) == fmt.Sprint(ib) && strings.Join(oa, "|") == strings.Join(ob, "|")
	})
	if ia["decode-0"] == 0 {
		t.Fatal("no blocks indexed at the end")
	}
	t.Logf("both replicas: %v blocks; overlaps %v", ia, oa)

}
