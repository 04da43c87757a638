package main

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/condisagg/condisagg/internal/testport"
	condisaggv1 "github.com/condisagg/condisagg/proto/condisagg/v1"
)

// TestServeResetPrefixCache runs serve against a vllm-sim with two data-parallel ranks and
// resets the engine's prefix cache through `condisagg reset-prefix-cache`: when the command
// returns, both ranks' index entries are gone and Explain credits nothing (no wait for the
// engine's AllBlocksCleared), and after the engine's clear the next request is indexed again.
// While a request runs the engine refuses the reset: the command exits 1 and the index keeps
// its entries (and takes new stores: the fence is lifted). An unknown worker is refused with the
// list of known ones.
func TestServeResetPrefixCache(t *testing.T) {
	model := requireModel(t)
	pub, rep := testport.Block(t, 2), testport.Block(t, 2)
	simAddr := startSimScaled(t, model, 2, pub, rep, 1) // real time: a long request keeps running
	a := startServe(t, dpServeConfig(model, simAddr, pub, rep))
	admin := adminClient(t, a)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	blocks := func() (total int64, per map[string]int64) {
		lw, err := admin.ListWorkers(ctx, &condisaggv1.ListWorkersRequest{})
		if err != nil {
			t.Fatal(err)
		}
		per = map[string]int64{}
		for _, w := range lw.Workers {
			per[w.Id] = w.IndexedGpuBlocks
			total += w.IndexedGpuBlocks
		}
		return total, per
	}
	// Polling the Admin state with a deadline: the streams run on their own goroutines.
	waitBlocks := func(what string, cond func(int64) bool) {
		t.Helper()
		for {
			n, per := blocks()
			if cond(n) {
				return
			}
			select {
			case <-ctx.Done():
				t.Fatalf("%s: not reached; indexed blocks %v", what, per)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	body := `{"model":"qwen3","max_tokens":1,"messages":[{"role":"user","content":"` +
		strings.Repeat("A reset empties the engine's prefix cache at once. ", 12) + `"}]}`
	send := func(rank string) {
		t.Helper()
		chatToRank(t, ctx, simAddr, body, rank)
	}
	explainCached := func() int64 {
		er, err := admin.Explain(ctx, &condisaggv1.ExplainRequest{Path: "/v1/chat/completions", Body: []byte(body)})
		if err != nil {
			t.Fatal(err)
		}
		return er.GetInputs().GetCachedTokens()
	}
	send("0")
	send("1")
	waitBlocks("the prompt indexed on both ranks", func(int64) bool {
		_, per := blocks()
		return per["decode-0"] > 0 && per["decode-0/dp1"] > 0
	})
	if explainCached() == 0 {
		t.Fatal("explain credits nothing before the reset")
	}

	var out, errOut bytes.Buffer
	if code := run(ctx, []string{"reset-prefix-cache", "-addr", a.adminGRPC, "decode-0"}, &out, &errOut); code != 0 {
		t.Fatalf("reset-prefix-cache exit %d: %s %s", code, out.String(), errOut.String())
	}
	if n, per := blocks(); n != 0 {
		t.Fatalf("right after the reset the index holds %v (out: %s)", per, out.String())
	}
	if c := explainCached(); c != 0 {
		t.Fatalf("right after the reset explain credits %d cached tokens", c)
	}
	if !strings.Contains(out.String(), "reset its prefix cache") {
		t.Errorf("output %q", out.String())
	}
	// vllm-sim publishes its AllBlocksCleared at once; after it a request is indexed again.
	send("0")
	waitBlocks("the prompt indexed again after the engine's clear", func(n int64) bool { return n > 0 })

	// A request that keeps running (vLLM, and vllm-sim, refuse the reset while blocks are in use).
	before, _ := blocks()
	sctx, stop := context.WithCancel(ctx)
	req, _ := http.NewRequestWithContext(sctx, http.MethodPost, "http://"+simAddr+"/v1/completions",
		strings.NewReader(`{"model":"qwen3","prompt":"Hello world","max_tokens":5000,"stream":true}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil { // the first token: running
		t.Fatal(err)
	}
	out.Reset()
	errOut.Reset()
	code := run(ctx, []string{"reset-prefix-cache", "-addr", a.adminGRPC, "decode-0"}, &out, &errOut)
	stop()
	resp.Body.Close()
	if code != 1 || !strings.Contains(errOut.String(), "did not reset") {
		t.Fatalf("reset while a request runs: exit %d, stderr %q, want 1 and the engine's refusal", code, errOut.String())
	}
	if n, per := blocks(); n < before {
		t.Fatalf("a refused reset dropped entries: %d blocks before, %v after", before, per)
	}
	send("1") // the fence is lifted: a new store is indexed
	waitBlocks("a store after the refused reset", func(n int64) bool { return n > before })

	out.Reset()
	errOut.Reset()
	if code := run(ctx, []string{"reset-prefix-cache", "-addr", a.adminGRPC, "nope"}, &out, &errOut); code != 1 ||
		!strings.Contains(errOut.String(), "NotFound") || !strings.Contains(errOut.String(), "decode-0/dp1") {
		t.Fatalf("unknown worker: exit %d, stderr %q", code, errOut.String())
	}
	if code := run(ctx, []string{"reset-prefix-cache", "-addr", a.adminGRPC}, &out, &errOut); code != 2 {
		t.Fatalf("no worker: exit %d, want 2", code)
	}
}
