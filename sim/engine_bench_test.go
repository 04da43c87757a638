package sim

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkStepDecode: one step of a batch of decoding requests (context ~1k tokens each).
func BenchmarkStepDecode(b *testing.B) {
	for _, batch := range []int{8, 64, 256} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			const maxTokens = 4000
			e, err := New(Config{NumGPUBlocks: batch * (1000 + maxTokens) / 16 * 2, MaxNumSeqs: batch})
			if err != nil {
				b.Fatal(err)
			}
			add := func(i int) {
				if _, err := e.Add(Request{Prompt: seqTokens(1000, uint32(i*1000)), MaxTokens: maxTokens}); err != nil {
					b.Fatal(err)
				}
			}
			for i := range batch {
				add(i)
			}
			var now time.Duration
			for e.Stats().Running < batch || e.res.Shape.PrefillTokens > 0 {
				now += e.Step(now).Duration
			}
			steps, toks := 0, 0
			b.ReportAllocs()
			for b.Loop() {
				res := e.Step(now)
				now += res.Duration
				steps++
				toks += len(res.Tokens)
				for range res.Finished { // keep the batch full
					add(steps)
				}
			}
			b.ReportMetric(float64(steps)/b.Elapsed().Seconds(), "steps/s")
			b.ReportMetric(float64(toks)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

// BenchmarkWorkload simulates a Mooncake-like conversation workload on one engine in virtual
// time: a shared 512-token system prompt, prompts of 1k-16k tokens extending earlier turns of
// 40 conversations, 50-500 output tokens, Poisson arrivals at 1 request/s. One iteration
// simulates 200 requests; simulated tokens/s counts prompt plus output tokens per wall second.
func BenchmarkWorkload(b *testing.B) {
	const n = 200
	type arrival struct {
		at  time.Duration
		req Request
	}
	rng := rand.New(rand.NewPCG(1, 2))
	system := seqTokens(512, 100000)
	convs := make([][]uint32, 40)
	var reqs []arrival
	var at time.Duration
	promptToks, outToks := 0, 0
	for i := range n {
		c := rng.IntN(len(convs))
		if convs[c] == nil {
			convs[c] = append([]uint32(nil), system...)
		}
		grow := 500 + rng.IntN(3000)
		convs[c] = append(convs[c], seqTokens(grow, uint32(200000+i*4000))...)
		if len(convs[c]) > 16000 {
			convs[c] = append(append([]uint32(nil), system...), seqTokens(grow, uint32(200000+i*4000))...)
		}
		out := 50 + rng.IntN(450)
		at += time.Duration(rng.ExpFloat64() * float64(time.Second))
		reqs = append(reqs, arrival{at, Request{Prompt: append([]uint32(nil), convs[c]...), MaxTokens: out}})
		promptToks += len(convs[c])
		outToks += out
	}
	var steps int
	b.ReportAllocs()
	for b.Loop() {
		e, err := New(Config{Events: true})
		if err != nil {
			b.Fatal(err)
		}
		var now time.Duration
		next := 0
		for next < len(reqs) || !e.Idle() {
			for next < len(reqs) && reqs[next].at <= now {
				r := reqs[next].req
				r.Prompt = append([]uint32(nil), r.Prompt...)
				if _, err := e.Add(r); err != nil {
					b.Fatal(err)
				}
				next++
			}
			res := e.Step(now)
			if res.Duration > 0 {
				steps++
				now += res.Duration
				continue
			}
			if t, ok := e.NextTransfer(); ok {
				now = t
			} else if next < len(reqs) {
				now = reqs[next].at
			}
		}
	}
	sec := b.Elapsed().Seconds()
	b.ReportMetric(float64(b.N*n)/sec, "requests/s")
	b.ReportMetric(float64(b.N*(promptToks+outToks))/sec, "sim-tokens/s")
	b.ReportMetric(float64(steps)/sec, "steps/s")
}
