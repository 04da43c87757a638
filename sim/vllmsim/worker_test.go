package vllmsim

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/condisagg/condisagg/sim"
)

// TestWorkerTimeScale runs a Worker in a synctest bubble: with --time-scale 10 a 1k-token
// prefill (28.5 ms of simulated GPU time) and one decode step (6.6 ms) take a tenth of that in
// (fake) wall time, and tokens are delivered at the end of their steps.
func TestWorkerTimeScale(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := testModel(t)
		w, err := NewWorker(WorkerConfig{Engine: sim.Config{Model: m, NumGPUBlocks: 1000}, TimeScale: 10})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		defer func() { cancel(); <-done }()

		start := time.Now()
		st, err := w.Submit(ctx, sim.Request{Prompt: seqTokens(1024, 1), MaxTokens: 2})
		if err != nil {
			t.Fatal(err)
		}
		toks, fin, err := st.Next(ctx, 0)
		if err != nil || len(toks) != 1 || fin != nil {
			t.Fatalf("first Next: %v %v %v", toks, fin, err)
		}
		prefill := m.StepTime(sim.StepShape{PrefillTokens: 1024, PrefillPairs: 1024 * 512})
		if got, want := time.Since(start), prefill/10; got != want {
			t.Fatalf("first token after %v, want %v (prefill %v / 10)", got, want, prefill)
		}
		var fin2 *sim.Finished
		for fin2 == nil {
			if _, fin2, err = st.Next(ctx, 1); err != nil {
				t.Fatal(err)
			}
		}
		decode := m.StepTime(sim.StepShape{DecodeSeqs: 1, DecodeContexts: 1025})
		if got, want := time.Since(start), (prefill+decode)/10; got != want || fin2.OutputTokens != 2 {
			t.Fatalf("finished after %v with %+v, want %v", got, fin2, want)
		}
		if s := w.Stats(); s.GenerationTokens != 2 || s.Running != 0 {
			t.Fatalf("stats %+v", s)
		}
	})
}
