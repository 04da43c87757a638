package engine

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// client talks to one OpenAI-compatible engine (vLLM's server or vllm-sim).
type client struct {
	base  string // http://host:port, no trailing slash
	model string
	http  *http.Client
	// headers go on every completion request: the pd-sidecar's routing headers when base is
	// the sidecar.
	headers map[string]string
}

// Bounds on what the engine may send back: a /metrics page, a /v1/models answer, one SSE line.
const (
	maxMetricsBytes = 8 << 20
	maxModelsBytes  = 1 << 20
	maxLineBytes    = 1 << 20
)

func (c *client) get(ctx context.Context, path string, limit int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("calibrate: engine %s: GET %s: %w (is the engine running, and --endpoint right?)", c.base, path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		return nil, fmt.Errorf("calibrate: engine %s: GET %s: %w", c.base, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("calibrate: engine %s: GET %s: HTTP %d: %.200s", c.base, path, resp.StatusCode, body)
	}
	return body, nil
}

// maxModelLen reads the served model's max_model_len from /v1/models (vLLM's model card field);
// 0 when the engine does not say.
func (c *client) maxModelLen(ctx context.Context) (int, error) {
	body, err := c.get(ctx, "/v1/models", maxModelsBytes)
	if err != nil {
		return 0, err
	}
	var models struct {
		Data []struct {
			ID          string `json:"id"`
			MaxModelLen int    `json:"max_model_len"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &models); err != nil {
		return 0, fmt.Errorf("calibrate: engine %s: /v1/models: %w", c.base, err)
	}
	var ids []string
	for _, m := range models.Data {
		if m.ID == c.model {
			return m.MaxModelLen, nil
		}
		ids = append(ids, m.ID)
	}
	return 0, fmt.Errorf("calibrate: --model %q: the engine %s serves %s", c.model, c.base, strings.Join(ids, ", "))
}

// engineState is what calibrate reads from the engine's /metrics.
type engineState struct {
	numGPUBlocks, blockSize int
	busy                    float64 // requests running or waiting
}

// metrics reads vllm:cache_config_info (num_gpu_blocks, block_size) and the running and
// waiting gauges. A missing cache config is an error naming the vLLM flag that removes it.
func (c *client) metrics(ctx context.Context) (engineState, error) {
	body, err := c.get(ctx, "/metrics", maxMetricsBytes)
	if err != nil {
		return engineState{}, err
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return engineState{}, fmt.Errorf("calibrate: engine %s: /metrics: %w", c.base, err)
	}
	var st engineState
	for _, name := range []string{"vllm:num_requests_running", "vllm:num_requests_waiting"} {
		if f := fams[name]; f != nil {
			for _, m := range f.GetMetric() {
				st.busy += m.GetGauge().GetValue()
			}
		}
	}
	f := fams["vllm:cache_config_info"]
	if f == nil || len(f.GetMetric()) == 0 {
		return st, fmt.Errorf("calibrate: engine %s: /metrics has no vllm:cache_config_info, so the KV capacity is unknown: vLLM publishes it unless started with --disable-log-stats (remove that flag), or pass --num-gpu-blocks", c.base)
	}
	// With data parallelism every rank has its own series; the capacity of one engine is one rank's.
	for _, l := range f.GetMetric()[0].GetLabel() {
		switch l.GetName() {
		case "num_gpu_blocks":
			st.numGPUBlocks, _ = strconv.Atoi(l.GetValue())
		case "block_size":
			st.blockSize, _ = strconv.Atoi(l.GetValue())
		}
	}
	if st.numGPUBlocks <= 0 || st.blockSize <= 0 {
		return st, fmt.Errorf("calibrate: engine %s: vllm:cache_config_info has num_gpu_blocks %d, block_size %d; want both > 0 (or pass --num-gpu-blocks)",
			c.base, st.numGPUBlocks, st.blockSize)
	}
	return st, nil
}

// nixlState is the sum over the engine's series (ranks) of vLLM's NixlConnector transfer
// histograms: transfers counted, their seconds and their bytes.
type nixlState struct {
	count, seconds, bytes float64
	present               bool // vllm:nixl_xfer_time_seconds is published
}

// nixl reads the NixlConnector transfer histograms from /metrics. vLLM publishes them only
// with a NixlConnector (--kv-transfer-config) and, in some versions, only after the first
// transfer: absent reads as zero, and the caller decides when absence is an error.
func (c *client) nixl(ctx context.Context) (nixlState, error) {
	body, err := c.get(ctx, "/metrics", maxMetricsBytes)
	if err != nil {
		return nixlState{}, err
	}
	tp := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := tp.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nixlState{}, fmt.Errorf("calibrate: engine %s: /metrics: %w", c.base, err)
	}
	var st nixlState
	if f := fams["vllm:nixl_xfer_time_seconds"]; f != nil {
		st.present = true
		for _, m := range f.GetMetric() {
			st.count += float64(m.GetHistogram().GetSampleCount())
			st.seconds += m.GetHistogram().GetSampleSum()
		}
	}
	if f := fams["vllm:nixl_bytes_transferred"]; f != nil {
		for _, m := range f.GetMetric() {
			st.bytes += m.GetHistogram().GetSampleSum()
		}
	}
	return st, nil
}

// Prompt token ids are drawn from this range: inside every common vocabulary (>= 32k) and clear
// of the special tokens, which sit at the top (Llama-3, Qwen) or below 1000.
const tokLo, tokHi = 1000, 30000

// prompt is n random token ids; the random first block keeps every probe off the prefix cache.
func prompt(rng *rand.Rand, n int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = tokLo + rng.IntN(tokHi-tokLo)
	}
	return p
}

// streamed is one streamed completion as calibrate reads it.
type streamed struct {
	times  []time.Duration // arrival of every token event, from the origin
	cached int             // usage.prompt_tokens_details.cached_tokens; -1 when not reported
	// kvTransfer is the pd-sidecar's X-Condisagg-KV-Transfer (pulled, rewritten, failed,
	// fallback); "" from an engine.
	kvTransfer string
}

// stream sends one streamed completion of the prompt for out tokens (ignore_eos). onToken, when
// not nil, hears the count of tokens received and the arrival time after each one.
func (c *client) stream(ctx context.Context, origin time.Time, prompt []int, out int, onToken func(n int, at time.Duration)) (streamed, error) {
	body, _ := json.Marshal(map[string]any{
		"model": c.model, "prompt": prompt, "max_tokens": out, "ignore_eos": true, "temperature": 0,
		"stream": true, "stream_options": map[string]any{"include_usage": true},
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		return streamed{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range c.headers {
		req.Header.Set(k, v)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return streamed{}, fmt.Errorf("calibrate: engine %s: POST /v1/completions: %w", c.base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return streamed{}, fmt.Errorf("calibrate: engine %s: POST /v1/completions (%d prompt tokens, max_tokens %d): HTTP %d: %.300s",
			c.base, len(prompt), out, resp.StatusCode, b)
	}
	st, err := readStream(resp.Body, origin, out, onToken)
	st.kvTransfer = resp.Header.Get("X-Condisagg-KV-Transfer")
	return st, err
}

// readStream reads an SSE completion stream: one time per event with a choice, and the
// usage's completion_tokens, which must equal the event count (an engine that merges tokens
// into one event would hide steps from the decode windows).
func readStream(r io.Reader, origin time.Time, want int, onToken func(n int, at time.Duration)) (streamed, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLineBytes)
	var times []time.Duration
	usage, cached := -1, -1
	for sc.Scan() {
		line, ok := bytes.CutPrefix(sc.Bytes(), []byte("data: "))
		if !ok {
			continue
		}
		now := time.Since(origin)
		if string(line) == "[DONE]" {
			break
		}
		var ev struct {
			Choices []json.RawMessage `json:"choices"`
			Usage   *struct {
				CompletionTokens int `json:"completion_tokens"`
				Details          *struct {
					CachedTokens int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
			Error *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(line, &ev); err != nil {
			return streamed{}, fmt.Errorf("calibrate: stream event %.100q: %w", line, err)
		}
		if ev.Error != nil {
			return streamed{}, fmt.Errorf("calibrate: the engine failed the request: %s", ev.Error.Message)
		}
		if len(ev.Choices) > 0 {
			times = append(times, now)
			if onToken != nil {
				onToken(len(times), now)
			}
		}
		if ev.Usage != nil {
			usage = ev.Usage.CompletionTokens
			if ev.Usage.Details != nil {
				cached = ev.Usage.Details.CachedTokens
			}
		}
	}
	if err := sc.Err(); err != nil {
		return streamed{}, fmt.Errorf("calibrate: reading the stream: %w", err)
	}
	switch {
	case len(times) == 0:
		return streamed{}, errors.New("calibrate: the stream ended without a token")
	case usage >= 0 && usage != len(times):
		return streamed{}, fmt.Errorf("calibrate: the engine streamed %d tokens in %d events; calibrate needs one event per token (vLLM: leave --stream-interval at 1)", usage, len(times))
	case len(times) != want:
		return streamed{}, fmt.Errorf("calibrate: the engine streamed %d tokens, asked for %d with ignore_eos", len(times), want)
	}
	return streamed{times: times, cached: cached}, nil
}
