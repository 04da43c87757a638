package extproc

import (
	"fmt"
	"github.com/condisagg/condisagg/route"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/condisagg/condisagg/tokenizer"
)

// benchWords is the vocabulary of the synthetic prompts (about 1.2 Qwen3 tokens per word).
var benchWords = strings.Fields(`the a router decides whether prefill runs remotely or on the decode worker
that already holds most of the prompt in its cache conversation tokens block keys overlap policy
request latency budget model serving cluster engine batch queue scheduler memory transfer network`)

// promptText returns about n tokens of text that no other seed produces.
func promptText(rng *rand.Rand, n int) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "session %d. ", rng.Uint64())
	for range n * 15 / 16 {
		sb.WriteString(benchWords[rng.IntN(len(benchWords))])
		sb.WriteByte(' ')
	}
	return sb.String()
}

// conversation is a chat body: alternating user/assistant turns, the last one a user turn.
func conversation(turns []string) []byte {
	var sb strings.Builder
	sb.WriteString(`{"model":"qwen3","stream":true,"messages":[`)
	for i, t := range turns {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(`{"role":"` + role + `","content":` + jsonString(t) + `}`)
	}
	sb.WriteString(`]}`)
	return []byte(sb.String())
}

// timedDecision runs one request through a fresh stream and returns the time from sending the
// body to receiving the decision; the booking is then released by an upstream error answer.
func timedDecision(b *testing.B, e *env, body []byte) time.Duration {
	v := e.open(buffered, streamed)
	v.requestHeaders(false, ":method", "POST", ":path", chatPath)
	v.recv()
	start := time.Now()
	v.requestBody(body, true)
	r := v.recv()
	d := time.Since(start)
	if r.GetRequestBody() == nil {
		b.Fatalf("no decision: %v", r)
	}
	v.responseHeaders(true, ":status", "500")
	v.recv()
	v.closeAndDrain()
	return d
}

func reportLatency(b *testing.B, lat []time.Duration, tokens int) {
	slices.Sort(lat)
	q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
	b.ReportMetric(q(0.50), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(float64(tokens), "tokens/req")
}

// BenchmarkDecisionLatency measures the decision through the gRPC stream (bufconn, BUFFERED):
// cold = a prompt never seen (tokenizer cache and KV index cold); warm = the next turn of a
// conversation whose previous turn was routed and is cached on a decode worker.
func BenchmarkDecisionLatency(b *testing.B) {
	tk := qwen3(b)
	for _, size := range []int{1024, 8192, 32768} {
		b.Run(fmt.Sprintf("tokens=%d/cold", size), func(b *testing.B) {
			e := newEnv(b, envOptions{})
			rng := rand.New(rand.NewPCG(1, uint64(size)))
			var lat []time.Duration
			for b.Loop() {
				body := conversation([]string{promptText(rng, size)})
				lat = append(lat, timedDecision(b, e, body))
			}
			b.ReportAllocs()
			reportLatency(b, lat, countTokens(b, tk, conversation([]string{promptText(rng, size)})))
		})
		b.Run(fmt.Sprintf("tokens=%d/warm", size), func(b *testing.B) {
			e := newEnv(b, envOptions{})
			rng := rand.New(rand.NewPCG(2, uint64(size)))
			var lat []time.Duration
			for b.Loop() {
				prev := []string{promptText(rng, size-200)}
				prevBody := conversation(prev)
				timedDecision(b, e, prevBody) // the previous turn went through the router
				e.cacheOn("decode-0", prevBody)
				next := conversation(append(prev, promptText(rng, 100), promptText(rng, 60)))
				lat = append(lat, timedDecision(b, e, next))
			}
			b.ReportAllocs()
			reportLatency(b, lat, countTokens(b, tk, conversation([]string{promptText(rng, size-200), promptText(rng, 100), promptText(rng, 60)})))
		})
	}
}

func countTokens(b *testing.B, tk *tokenizer.Tokenizer, body []byte) int {
	toks, err := tk.EncodeChat(nil, body, tokenizer.ChatOptions{})
	if err != nil {
		b.Fatal(err)
	}
	return len(toks)
}

// BenchmarkDecisionThroughput: decisions per second with 1k-token prompts, streams in
// parallel (GOMAXPROCS goroutines), each request on its own stream as Envoy sends them.
func BenchmarkDecisionThroughput(b *testing.B) {
	e := newEnv(b, envOptions{})
	rng := rand.New(rand.NewPCG(3, 3))
	bodies := make([][]byte, 512)
	for i := range bodies {
		bodies[i] = conversation([]string{promptText(rng, 1024)})
	}
	b.ReportAllocs()
	b.ResetTimer()
	var next atomicCounter
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			timedDecision(b, e, bodies[next.add()%len(bodies)])
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
}

type atomicCounter struct{ n atomic.Int64 }

func (c *atomicCounter) add() int { return int(c.n.Add(1)) }

// BenchmarkRouterDecide is the pipeline without gRPC (DryRun: nothing booked) for an 8k-token
// chat, split by stage: warm = the next turn of a conversation whose prefix is cached on a
// decode worker (the same body every iteration); cold = a fresh prompt every iteration (its
// generation is outside the stage timings, which come from Decide itself).
func BenchmarkRouterDecide(b *testing.B) {
	for _, warm := range []bool{true, false} {
		name := map[bool]string{true: "warm", false: "cold"}[warm]
		b.Run("tokens=8192/"+name, func(b *testing.B) {
			e := newEnv(b, envOptions{})
			rng := rand.New(rand.NewPCG(4, 4))
			prev := []string{promptText(rng, 8000)}
			e.cacheOn("decode-0", conversation(prev))
			body := conversation(append(prev, promptText(rng, 100), promptText(rng, 60)))
			var stages [route.NumStages]time.Duration
			b.ReportAllocs()
			for b.Loop() {
				if !warm {
					body = conversation([]string{promptText(rng, 8100)})
				}
				out, err := e.router.Decide(b.Context(), &route.Request{Endpoint: route.EndpointChat, Body: body, DryRun: true})
				if err != nil || (warm && out.Reason != "bypass_isl") {
					b.Fatalf("%v %v", out.Reason, err)
				}
				for i, d := range out.Stages {
					stages[i] += d
				}
			}
			for i, d := range stages {
				b.ReportMetric(float64(d.Microseconds())/float64(b.N), route.StageNames[i]+"-µs/op")
			}
		})
	}
}

// BenchmarkRouterThroughput: decisions per second of the pipeline alone (tokenize, keys,
// overlap, snapshot, policy, book, release) with 1k-token prompts, GOMAXPROCS goroutines,
// no gRPC and no client in the process.
func BenchmarkRouterThroughput(b *testing.B) {
	e := newEnv(b, envOptions{})
	rng := rand.New(rand.NewPCG(5, 5))
	bodies := make([][]byte, 512)
	for i := range bodies {
		bodies[i] = conversation([]string{promptText(rng, 1024)})
	}
	var next atomicCounter
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			out, err := e.router.Decide(b.Context(), &route.Request{Endpoint: route.EndpointChat, Body: bodies[next.add()%len(bodies)]})
			if err != nil {
				b.Error(err)
				return
			}
			e.pool.Release(out.BookingID)
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
}
