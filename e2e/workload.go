package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
)

// Message is one chat message.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// ChatBody is a streaming chat completion for model qwen3 with usage in the stream.
func ChatBody(msgs []Message, maxTokens int) []byte {
	b, _ := json.Marshal(map[string]any{"model": "qwen3", "messages": msgs, "max_tokens": maxTokens,
		"stream": true, "stream_options": map[string]any{"include_usage": true}})
	return b
}

// vocabulary is the word list of Words (common English words: about 1.2 tokens each).
var vocabulary = strings.Fields(`the system routes every request to a worker that holds its prefix
cache when the prompt is long and the decode pool has room otherwise prefill runs remote on a
dedicated machine which streams the key value blocks over the network before decoding starts
model serving latency throughput budget token block memory queue batch schedule policy cluster
river mountain garden window morning evening travel market library science music history ocean`)

// Words returns n pseudo-random words from seed: distinct seeds give prompts that share no
// prefix beyond their first word.
func Words(seed uint64, n int) string {
	var b strings.Builder
	x := seed*0x9e3779b97f4a7c15 + 1
	for i := range n {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(vocabulary[x%uint64(len(vocabulary))])
	}
	return b.String()
}

// servedMetric counts finished requests on a simulator.
const servedMetric = "vllm:e2e_request_latency_seconds_count"

// Served returns every worker's count of finished requests (vllm-sim /metrics); exited and
// paused simulators are left out.
func (s *Stack) Served(ctx context.Context) (map[string]int, error) {
	out := map[string]int{}
	for _, w := range s.Workers {
		select {
		case <-w.Sim.Exited():
			continue
		default:
		}
		if w.Sim.Paused() {
			continue
		}
		v, err := s.SimMetric(ctx, w, servedMetric)
		if err != nil {
			return nil, err
		}
		out[w.Spec.Name] = int(v)
	}
	return out, nil
}

// WaitServed polls the simulators until total more requests have finished than in before,
// and returns the per-worker increase (zero entries dropped).
func (s *Stack) WaitServed(ctx context.Context, before map[string]int, total int) (map[string]int, error) {
	var delta map[string]int
	err := Poll(ctx, func() error {
		now, err := s.Served(ctx)
		if err != nil {
			return err
		}
		delta, n := map[string]int{}, 0
		for k, v := range now {
			if d := v - before[k]; d != 0 {
				delta[k] = d
				n += d
			}
		}
		if n < total {
			return fmt.Errorf("%d of %d requests finished: %v", n, total, delta)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	now, err := s.Served(ctx)
	if err != nil {
		return nil, err
	}
	delta = map[string]int{}
	for k, v := range now {
		if d := v - before[k]; d != 0 {
			delta[k] = d
		}
	}
	return maps.Clone(delta), nil
}
