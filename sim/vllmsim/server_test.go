package vllmsim

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/condisagg/condisagg/tokenizer"
)

func TestVocabRoundTrip(t *testing.T) {
	for _, model := range []string{"qwen3", "llama3"} {
		t.Run(model, func(t *testing.T) {
			tok := loadTokenizer(t, model)
			v, err := NewVocab(tok)
			if err != nil {
				t.Fatal(err)
			}
			for _, bareFirst := range []bool{true, false} {
				out := v.Output(uint64(len(model)), bareFirst)
				ids := make([]uint32, 200)
				for i := range ids {
					ids[i] = out(i)
				}
				text := string(v.AppendText(nil, ids))
				if bareFirst == strings.HasPrefix(text, " ") {
					t.Fatalf("bareFirst=%v: text %q", bareFirst, text[:20])
				}
				if got := tok.Encode(nil, text, tokenizer.WithoutSpecialTokens); !reflect.DeepEqual(got, ids) {
					t.Fatalf("decode->encode round trip (bareFirst=%v) differs:\n got %v\nwant %v", bareFirst, got[:10], ids[:10])
				}
			}
		})
	}
}

type chatResp struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Model   string `json:"model"`
	Choices []struct {
		Text    string `json:"text"`
		Message struct {
			Role, Content string
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		TotalTokens         int `json:"total_tokens"`
		PromptTokensDetails *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
	KVTransferParams json.RawMessage `json:"kv_transfer_params"`
}

func chatBody(extra string, msgs ...string) string {
	var b strings.Builder
	b.WriteString(`{"model":"qwen3","messages":[`)
	for i, m := range msgs {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		if i > 0 {
			b.WriteByte(',')
		}
		mj, _ := json.Marshal(m)
		fmt.Fprintf(&b, `{"role":%q,"content":%s}`, role, mj)
	}
	b.WriteString("]")
	b.WriteString(extra)
	b.WriteString("}")
	return b.String()
}

func TestHTTPChatNonStreaming(t *testing.T) {
	ti := startInstance(t, instOpts{details: true})
	body := chatBody(`,"max_tokens":7`, "Tell me a story about a dragon.")
	code, b := ti.post(t, "/v1/chat/completions", body, "X-Request-Id", "abc")
	if code != 200 {
		t.Fatalf("status %d: %s", code, b)
	}
	var r chatResp
	decodeJSON(t, b, &r)
	prompt, _ := ti.tok.EncodeChat(nil, []byte(body), tokenizer.ChatOptions{})
	if r.ID != "chatcmpl-abc" || r.Object != "chat.completion" || r.Model != "qwen3" || len(r.Choices) != 1 ||
		r.Choices[0].FinishReason != "length" || r.Choices[0].Message.Role != "assistant" ||
		r.Usage.PromptTokens != len(prompt) || r.Usage.CompletionTokens != 7 || r.Usage.TotalTokens != len(prompt)+7 ||
		r.Usage.PromptTokensDetails == nil || string(r.KVTransferParams) != "null" {
		t.Fatalf("response %s", b)
	}
	if n := len(ti.tok.Encode(nil, r.Choices[0].Message.Content, tokenizer.WithoutSpecialTokens)); n != 7 {
		t.Fatalf("content %q re-tokenizes to %d tokens, want 7", r.Choices[0].Message.Content, n)
	}
	// Without max_tokens the "model" stops by itself.
	code, b = ti.post(t, "/v1/chat/completions", chatBody("", "Hi"))
	decodeJSON(t, b, &r)
	if code != 200 || r.Choices[0].FinishReason != "stop" || r.Usage.CompletionTokens < 16 {
		t.Fatalf("no max_tokens: %d %s", code, b)
	}
}

func TestHTTPCompletionsNonStreaming(t *testing.T) {
	ti := startInstance(t, instOpts{})
	for _, tc := range []struct{ prompt, spec string }{
		{`"Once upon a time"`, "string prompt: output starts with a space"},
		{`"Once upon a time "`, "prompt ending in a space: output starts with a word"},
		{`[9707, 1879]`, "token-id prompt"},
	} {
		code, b := ti.post(t, "/v1/completions", `{"prompt":`+tc.prompt+`,"max_tokens":4}`)
		var r chatResp
		decodeJSON(t, b, &r)
		if code != 200 || r.Object != "text_completion" || r.Choices[0].FinishReason != "length" || r.Usage.CompletionTokens != 4 {
			t.Fatalf("%s: %d %s", tc.spec, code, b)
		}
		if strings.HasSuffix(tc.prompt, ` "`) == strings.HasPrefix(r.Choices[0].Text, " ") {
			t.Fatalf("%s: text %q", tc.spec, r.Choices[0].Text)
		}
		if r.Usage.PromptTokensDetails != nil {
			t.Fatalf("%s: prompt_tokens_details without --enable-prompt-tokens-details", tc.spec)
		}
	}
}

// sseEvents splits an SSE body into its data payloads and checks the framing.
func sseEvents(t *testing.T, b []byte) []string {
	t.Helper()
	s := string(b)
	if !strings.HasSuffix(s, "data: [DONE]\n\n") {
		t.Fatalf("SSE body does not end with data: [DONE]: %q", s)
	}
	var out []string
	for _, ev := range strings.Split(strings.TrimSuffix(s, "\n\n"), "\n\n") {
		if !strings.HasPrefix(ev, "data: ") || strings.Contains(ev, "\n") {
			t.Fatalf("malformed SSE event %q", ev)
		}
		out = append(out, strings.TrimPrefix(ev, "data: "))
	}
	return out
}

func TestHTTPStreamingSSE(t *testing.T) {
	ti := startInstance(t, instOpts{})
	t.Run("chat_with_usage", func(t *testing.T) {
		code, b := ti.post(t, "/v1/chat/completions", chatBody(`,"max_tokens":5,"stream":true,"stream_options":{"include_usage":true}`, "Hello"))
		if code != 200 {
			t.Fatalf("status %d", code)
		}
		evs := sseEvents(t, b)
		if len(evs) != 1+5+1+1 {
			t.Fatalf("%d events, want role + 5 tokens + usage + DONE: %q", len(evs), evs)
		}
		type chunk struct {
			Object  string `json:"object"`
			Choices []struct {
				Delta        map[string]string `json:"delta"`
				FinishReason *string           `json:"finish_reason"`
			} `json:"choices"`
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		var c chunk
		decodeJSON(t, []byte(evs[0]), &c)
		if c.Object != "chat.completion.chunk" || c.Choices[0].Delta["role"] != "assistant" || c.Choices[0].Delta["content"] != "" || c.Usage != nil {
			t.Fatalf("first chunk %s", evs[0])
		}
		var text string
		for i, ev := range evs[1:6] {
			c = chunk{}
			decodeJSON(t, []byte(ev), &c)
			text += c.Choices[0].Delta["content"]
			if last := i == 4; last != (c.Choices[0].FinishReason != nil) || last && *c.Choices[0].FinishReason != "length" {
				t.Fatalf("token chunk %d: %s", i, ev)
			}
		}
		if n := len(ti.tok.Encode(nil, text, tokenizer.WithoutSpecialTokens)); n != 5 {
			t.Fatalf("streamed text %q is %d tokens", text, n)
		}
		c = chunk{}
		decodeJSON(t, []byte(evs[6]), &c)
		if len(c.Choices) != 0 || c.Usage == nil || c.Usage.CompletionTokens != 5 {
			t.Fatalf("usage chunk %s", evs[6])
		}
	})
	t.Run("completions_without_usage", func(t *testing.T) {
		_, b := ti.post(t, "/v1/completions", `{"prompt":"Hi","max_tokens":3,"stream":true}`)
		evs := sseEvents(t, b)
		if len(evs) != 4 || !strings.Contains(evs[2], `"finish_reason":"length"`) || strings.Contains(b2s(b), "usage") ||
			!strings.Contains(evs[0], `"object":"text_completion"`) {
			t.Fatalf("events %q", evs)
		}
	})
}

func b2s(b []byte) string { return string(b) }

func TestHTTPTokenizeModelsHealth(t *testing.T) {
	ti := startInstance(t, instOpts{})
	code, b := ti.post(t, "/tokenize", `{"prompt":"Hello world"}`)
	var tr struct {
		Count       int      `json:"count"`
		MaxModelLen int      `json:"max_model_len"`
		Tokens      []uint32 `json:"tokens"`
	}
	decodeJSON(t, b, &tr)
	if want := ti.tok.Encode(nil, "Hello world", tokenizer.WithSpecialTokens); code != 200 || !reflect.DeepEqual(tr.Tokens, want) || tr.Count != len(want) || tr.MaxModelLen != 40960 {
		t.Fatalf("vllm-kv-events.md §6.2 /tokenize completion: %d %s", code, b)
	}
	body := chatBody("", "Hello")
	_, b = ti.post(t, "/tokenize", body)
	decodeJSON(t, b, &tr)
	if want, _ := ti.tok.EncodeChat(nil, []byte(body), tokenizer.ChatOptions{}); !reflect.DeepEqual(tr.Tokens, want) {
		t.Fatalf("§6.2 /tokenize chat: %s", b)
	}
	if code, _ := ti.post(t, "/tokenize", chatBody(`,"continue_final_message":true`, "Hello")); code != 400 {
		t.Fatalf("§6.2 both add_generation_prompt and continue_final_message: %d, want 400", code)
	}
	code, b = ti.get(t, "/v1/models")
	if code != 200 || !strings.Contains(string(b), `"id":"qwen3"`) || !strings.Contains(string(b), `"object":"list"`) {
		t.Fatalf("/v1/models: %d %s", code, b)
	}
	if code, _ := ti.get(t, "/health"); code != 200 {
		t.Fatalf("/health: %d", code)
	}
}

func TestHTTPErrors(t *testing.T) {
	ti := startInstance(t, instOpts{numBlocks: 64})
	for _, tc := range []struct {
		name, path, body string
		code             int
	}{
		{"bad_json", "/v1/completions", `{"prompt":`, 400},
		{"unknown_model", "/v1/completions", `{"model":"gpt","prompt":"a"}`, 404},
		{"max_tokens_zero", "/v1/completions", `{"prompt":"a","max_tokens":0}`, 400},
		{"over_max_model_len", "/v1/completions", `{"prompt":"a","max_tokens":50000}`, 400},
		{"over_kv_capacity", "/v1/completions", `{"prompt":"a","max_tokens":2000}`, 400},
		{"n_2", "/v1/completions", `{"prompt":"a","n":2}`, 400},
		{"no_messages", "/v1/chat/completions", `{"messages":"x"}`, 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, b := ti.post(t, tc.path, tc.body)
			var e struct {
				Error struct {
					Message string `json:"message"`
					Code    int    `json:"code"`
				} `json:"error"`
			}
			decodeJSON(t, b, &e)
			if code != tc.code || e.Error.Code != tc.code || e.Error.Message == "" {
				t.Fatalf("%d %s, want %d with an OpenAI error body", code, b, tc.code)
			}
		})
	}
}

func TestHTTPMetrics(t *testing.T) {
	ti := startInstance(t, instOpts{numBlocks: 777})
	_, b := ti.get(t, "/metrics")
	s := string(b)
	for _, want := range []string{
		`vllm:cache_config_info{block_size="16",`, `num_gpu_blocks="777"`,
		`vllm:num_requests_running{engine="0",model_name="qwen3"} 0`,
		`vllm:num_requests_waiting{engine="0",model_name="qwen3"} 0`,
		`vllm:kv_cache_usage_perc{engine="0",model_name="qwen3"} 0`,
		`vllm:prefix_cache_queries_total{engine="0",model_name="qwen3"} 0`,
		`vllm:prefix_cache_hits_total{engine="0",model_name="qwen3"} 0`,
	} {
		if !strings.Contains(s, want) {
			t.Fatalf("vllm-kv-events.md §6.1: /metrics lacks %q:\n%s", want, s)
		}
	}
	ti.post(t, "/v1/completions", `{"prompt":"Hello world","max_tokens":3}`)
	if got := ti.metric(t, "vllm:prompt_tokens_total"); got != "2" {
		t.Fatalf("prompt tokens %s, want 2", got)
	}
	if got := ti.metric(t, "vllm:time_to_first_token_seconds_count"); got != "1" {
		t.Fatalf("TTFT count %s, want 1", got)
	}
}

func TestTwoTurnConversationHitsCache(t *testing.T) {
	ti := startInstance(t, instOpts{details: true})
	user1 := strings.Repeat("Describe the history of the city and its people in detail. ", 12)
	const out1 = 40
	body1 := chatBody(`,"max_tokens":`+strconv.Itoa(out1), user1)
	_, b := ti.post(t, "/v1/chat/completions", body1)
	var r1 chatResp
	decodeJSON(t, b, &r1)
	hits0 := ti.metric(t, "vllm:prefix_cache_hits_total")

	body2 := chatBody(`,"max_tokens":5`, user1, r1.Choices[0].Message.Content, "And what about its rivers?")
	p1, _ := ti.tok.EncodeChat(nil, []byte(body1), tokenizer.ChatOptions{})
	p2, _ := ti.tok.EncodeChat(nil, []byte(body2), tokenizer.ChatOptions{})
	if !reflect.DeepEqual(p2[:len(p1)], p1) {
		t.Fatal("turn 2's prompt does not extend turn 1's")
	}
	_, b = ti.post(t, "/v1/chat/completions", body2)
	var r2 chatResp
	decodeJSON(t, b, &r2)
	// Turn 1 cached every full block of prompt + output except the last sampled token.
	want := (len(p1) + out1 - 1) / 16 * 16
	if got := r2.Usage.PromptTokensDetails.CachedTokens; got != want {
		t.Fatalf("turn 2 cached %d tokens, want %d (turn 1: %d prompt + %d output tokens)", got, want, len(p1), out1)
	}
	if hits := ti.metric(t, "vllm:prefix_cache_hits_total"); hits0 != "0" || hits != strconv.Itoa(want) {
		t.Fatalf("prefix_cache_hits_total %s -> %s, want 0 -> %d", hits0, hits, want)
	}
}

// TestHTTPPrefillDecodeFlow: the NixlConnector flow as vLLM 0.32 answers it (measured against
// a real pair, docs/disagg-truth.md §1): P's kv_transfer_params carry the block ids per KV
// cache group, the prompt length and P's own prefix-cache hit (remote_prefill_cached_tokens);
// a decode leg that carries that hit reports it as its cached_tokens (0 for a prompt P
// computed afresh, though D loaded all of it), one without it reports its own count, the
// whole prompt.
func TestHTTPPrefillDecodeFlow(t *testing.T) {
	p := startInstance(t, instOpts{kvTransfer: true, details: true})
	d := startInstance(t, instOpts{kvTransfer: true, details: true})
	prompt := strings.Repeat("Summarise the following report about the quarterly results. ", 10)
	pj, _ := json.Marshal(prompt)
	leg1 := `{"model":"qwen3","prompt":` + string(pj) + `,"max_tokens":1,"stream":false,"kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}}`
	type params struct {
		DoRemotePrefill           bool      `json:"do_remote_prefill"`
		DoRemoteDecode            bool      `json:"do_remote_decode"`
		RemoteBlockIDs            [][]int32 `json:"remote_block_ids"`
		RemoteEngineID            string    `json:"remote_engine_id"`
		RemoteRequestID           string    `json:"remote_request_id"`
		RemoteHost                string    `json:"remote_host"`
		RemotePort                int       `json:"remote_port"`
		TPSize                    int       `json:"tp_size"`
		RemoteNumTokens           int       `json:"remote_num_tokens"`
		RemotePrefillCachedTokens *int      `json:"remote_prefill_cached_tokens"`
	}
	prefill := func(id string) (chatResp, params) {
		t.Helper()
		code, b := p.post(t, "/v1/completions", leg1, "X-Request-Id", id)
		var r chatResp
		decodeJSON(t, b, &r)
		var kv params
		if code != 200 || json.Unmarshal(r.KVTransferParams, &kv) != nil {
			t.Fatalf("prefill leg: %d %s", code, b)
		}
		n := r.Usage.PromptTokens
		if !kv.DoRemotePrefill || kv.DoRemoteDecode || len(kv.RemoteBlockIDs) != 1 || len(kv.RemoteBlockIDs[0]) != (n+15)/16 ||
			kv.RemoteEngineID != "engine-1" || kv.RemoteRequestID != "cmpl-"+id || kv.RemoteHost != "10.0.0.5" || kv.RemotePort != 5600 ||
			kv.TPSize != 1 || kv.RemoteNumTokens != n || kv.RemotePrefillCachedTokens == nil ||
			*kv.RemotePrefillCachedTokens != r.Usage.PromptTokensDetails.CachedTokens ||
			r.Choices[0].FinishReason != "length" || r.Usage.CompletionTokens != 1 {
			t.Fatalf("vllm-kv-events.md §6.3 step 3: %s", b)
		}
		return r, kv
	}
	decode := func(kvJSON string) chatResp {
		t.Helper()
		leg2 := `{"model":"qwen3","prompt":` + string(pj) + `,"max_tokens":6,"kv_transfer_params":` + kvJSON + `}`
		code, b := d.post(t, "/v1/completions", leg2, "X-Request-Id", "r-1")
		var r2 chatResp
		decodeJSON(t, b, &r2)
		if code != 200 || r2.Usage.CompletionTokens != 6 || string(r2.KVTransferParams) != "null" {
			t.Fatalf("§6.3 step 4 decode leg: %d %s", code, b)
		}
		return r2
	}
	r, kv := prefill("r-1")
	n := r.Usage.PromptTokens
	if *kv.RemotePrefillCachedTokens != 0 {
		t.Fatalf("a fresh prompt: P reports %d cached", *kv.RemotePrefillCachedTokens)
	}
	// P's params verbatim: D reports P's hit, 0, though it loaded the whole prompt.
	if got := decode(string(r.KVTransferParams)).Usage.PromptTokensDetails.CachedTokens; got != 0 {
		t.Fatalf("decode leg with remote_prefill_cached_tokens 0: cached_tokens %d, want 0", got)
	}
	// Without the key, D reports its own count: the whole prompt.
	var raw map[string]any
	_ = json.Unmarshal(r.KVTransferParams, &raw)
	delete(raw, "remote_prefill_cached_tokens")
	stripped, _ := json.Marshal(raw)
	if got := decode(string(stripped)).Usage.PromptTokensDetails.CachedTokens; got != n {
		t.Fatalf("decode leg without remote_prefill_cached_tokens: cached_tokens %d, want %d", got, n)
	}
	// The same prompt again at P: P's own hit travels in the params, and D reports it.
	r, kv = prefill("r-2")
	want := (n - 1) / 16 * 16
	if *kv.RemotePrefillCachedTokens != want {
		t.Fatalf("P's second prefill: remote_prefill_cached_tokens %d, want %d", *kv.RemotePrefillCachedTokens, want)
	}
	if got := decode(string(r.KVTransferParams)).Usage.PromptTokensDetails.CachedTokens; got != want {
		t.Fatalf("decode leg after P's hit: cached_tokens %d, want P's %d", got, want)
	}
	// The transferred blocks are now in D's cache: a local request for the same prompt hits.
	var r2 chatResp
	_, b := d.post(t, "/v1/completions", `{"model":"qwen3","prompt":`+string(pj)+`,"max_tokens":1}`)
	decodeJSON(t, b, &r2)
	if want := (n - 1) / 16 * 16; r2.Usage.PromptTokensDetails.CachedTokens != want {
		t.Fatalf("vllm-kv-events.md §3.7: local request after remote prefill cached %d, want %d", r2.Usage.PromptTokensDetails.CachedTokens, want)
	}
	// Without a connector kv_transfer_params are ignored, as in vLLM.
	plain := startInstance(t, instOpts{})
	_, b = plain.post(t, "/v1/completions", leg1)
	decodeJSON(t, b, &r)
	if string(r.KVTransferParams) != "null" {
		t.Fatalf("no connector: %s", b)
	}
}

// TestChatTurnExtendsPrefix: for both chat templates, turn 2's prompt (with turn 1's answer as
// the assistant message) starts with turn 1's prompt followed by the generated ids, so the
// blocks cached by turn 1 are hit.
func TestChatTurnExtendsPrefix(t *testing.T) {
	for _, model := range []string{"qwen3", "llama3"} {
		t.Run(model, func(t *testing.T) {
			tok := loadTokenizer(t, model)
			v, err := NewVocab(tok)
			if err != nil {
				t.Fatal(err)
			}
			body1 := chatBody("", "Write about rivers.")
			p1, err := tok.EncodeChat(nil, []byte(body1), tokenizer.ChatOptions{})
			if err != nil {
				t.Fatal(err)
			}
			out := v.Output(3, true)
			ids := make([]uint32, 30)
			for i := range ids {
				ids[i] = out(i)
			}
			body2 := chatBody("", "Write about rivers.", string(v.AppendText(nil, ids)), "More.")
			p2, err := tok.EncodeChat(nil, []byte(body2), tokenizer.ChatOptions{})
			if err != nil {
				t.Fatal(err)
			}
			want := append(append([]uint32(nil), p1...), ids...)
			if len(p2) < len(want) || !reflect.DeepEqual(p2[:len(want)], want) {
				t.Fatalf("turn 2 does not extend turn 1 + output:\n got %v\nwant %v", p2[:min(len(p2), len(want))], want)
			}
		})
	}
}

// TestHTTPDecodeLegCachedTokens: a decode leg without remote_prefill_cached_tokens reports the
// whole prompt cached after a complete transfer (vLLM 0.32's L), and a failed KV read
// (--kv-transfer-failure-rate) under kv_load_failure_policy "recompute" reports only the
// decode worker's own prefix hit; under "fail", vLLM's default, it answers 500, or an error
// event in a stream (after the chat role chunk), exactly as the real engine does
// (docs/disagg-truth.md).
func TestHTTPDecodeLegCachedTokens(t *testing.T) {
	prompt := strings.Repeat("Summarise the following report about the quarterly results. ", 10)
	pj, _ := json.Marshal(prompt)
	const kvp = `{"do_remote_prefill":true,"do_remote_decode":false,"remote_block_ids":[[1,2,3]],"remote_engine_id":"e","remote_host":"h","remote_port":1}`
	leg := `{"model":"qwen3","prompt":` + string(pj) + `,"max_tokens":2,"kv_transfer_params":` + kvp + `}`
	for _, tc := range []struct {
		name      string
		rate      float64
		policy    string
		warmLocal bool // D served the prompt locally before
		want      func(n int) int
	}{
		{name: "transferred_reports_L", rate: 0, want: func(n int) int { return n }},
		{name: "transferred_warm_reports_L", rate: 0, warmLocal: true, want: func(n int) int { return n }},
		{name: "failed_cold_reports_0", rate: 1, policy: FailurePolicyRecompute, want: func(int) int { return 0 }},
		{name: "failed_warm_reports_local_hit", rate: 1, policy: FailurePolicyRecompute, warmLocal: true, want: func(n int) int { return (n - 1) / 16 * 16 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := startInstance(t, instOpts{kvTransfer: true, details: true, xferFailRate: tc.rate, xferPolicy: tc.policy})
			if tc.warmLocal {
				d.post(t, "/v1/completions", `{"model":"qwen3","prompt":`+string(pj)+`,"max_tokens":1}`)
			}
			code, b := d.post(t, "/v1/completions", leg, "X-Request-Id", "r-"+tc.name)
			var r chatResp
			decodeJSON(t, b, &r)
			if code != 200 || r.Usage.PromptTokensDetails == nil {
				t.Fatalf("decode leg: %d %s", code, b)
			}
			if n := r.Usage.PromptTokens; r.Usage.PromptTokensDetails.CachedTokens != tc.want(n) {
				t.Fatalf("cached_tokens %d, want %d (prompt %d tokens)", r.Usage.PromptTokensDetails.CachedTokens, tc.want(n), n)
			}
		})
	}
	t.Run("failed_under_fail_policy", func(t *testing.T) {
		d := startInstance(t, instOpts{kvTransfer: true, details: true, xferFailRate: 1})
		code, b := d.post(t, "/v1/completions", leg, "X-Request-Id", "r-fail")
		if want := `{"error":{"code":500,"message":"Internal server error","param":null,"type":"InternalServerError"}}`; code != 500 || strings.TrimSpace(string(b)) != want {
			t.Fatalf("non-streamed: %d %s, want 500 %s", code, b, want)
		}
		chat := `{"model":"qwen3","messages":[{"role":"user","content":` + string(pj) + `}],"max_tokens":2,"stream":true,"stream_options":{"include_usage":true},"kv_transfer_params":` + kvp + `}`
		code, b = d.post(t, "/v1/chat/completions", chat, "X-Request-Id", "r-fail-stream")
		events := strings.Split(strings.TrimSpace(string(b)), "\n\n")
		if code != 200 || len(events) != 3 || !strings.Contains(events[0], `"role":"assistant"`) ||
			!strings.HasPrefix(events[1], `data: {"error":{`) || !strings.Contains(events[1], `"code":500`) || events[2] != "data: [DONE]" {
			t.Fatalf("streamed: %d %q, want the role chunk, an error event and [DONE]", code, events)
		}
	})
}
