package vllmsim

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/condisagg/condisagg/kvevents"
	kvzmq "github.com/condisagg/condisagg/kvevents/zmq"
	"github.com/condisagg/condisagg/policy"
	"github.com/condisagg/condisagg/pool"
	"github.com/condisagg/condisagg/route"
	"github.com/condisagg/condisagg/sim"
)

var sqlLoRA = []LoRAModule{{Name: "sql-lora", Path: "/adapters/sql-lora"}}

// TestLoRAModels: an adapter is served besides the base model (vLLM --lora-modules): listed by
// /v1/models with its path as root and the base model as parent, accepted by the completion
// endpoints and /tokenize; an unknown name gets vLLM's 404 naming param "model".
func TestLoRAModels(t *testing.T) {
	ti := startInstance(t, instOpts{lora: sqlLoRA})
	_, b := ti.get(t, "/v1/models")
	var list struct {
		Data []struct {
			ID, Root string
			Parent   *string
		}
	}
	decodeJSON(t, b, &list)
	if len(list.Data) != 2 || list.Data[1].ID != "sql-lora" || list.Data[1].Root != "/adapters/sql-lora" ||
		list.Data[1].Parent == nil || *list.Data[1].Parent != "qwen3" || list.Data[0].Parent != nil {
		t.Fatalf("docs/vllm-facts.md §d /v1/models: %s", b)
	}
	if code, b := ti.post(t, "/v1/completions", `{"model":"sql-lora","prompt":"Hello","max_tokens":2}`); code != 200 {
		t.Fatalf("adapter completion: %d %s", code, b)
	}
	if code, b := ti.post(t, "/tokenize", `{"model":"sql-lora","prompt":"Hello world"}`); code != 200 {
		t.Fatalf("adapter tokenize: %d %s", code, b)
	}
	code, b := ti.post(t, "/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`)
	want := "{\"error\":{\"code\":404,\"message\":\"The model `gpt-4o` does not exist.\",\"param\":\"model\",\"type\":\"NotFoundError\"}}\n"
	if code != 404 || string(b) != want {
		t.Fatalf("unknown model: %d %s", code, b)
	}
	if _, err := NewServer(ServerConfig{ModelNames: []string{"qwen3"}, LoRAModules: []LoRAModule{{Name: "qwen3", Path: "/x"}},
		Tokenizer: ti.tok, Vocab: &Vocab{}, Worker: ti.Worker, Registry: prometheus.NewRegistry()}); err == nil {
		t.Fatal("an adapter named like the base model was accepted")
	}
	for in, ok := range map[string]bool{"sql=/a/b": true, "sql": false, "=/a": false, "sql=": false} {
		if _, err := ParseLoRAModule(in); (err == nil) != ok {
			t.Errorf("ParseLoRAModule(%q): %v", in, err)
		}
	}
}

// TestDetokenize: vLLM's /detokenize ({"model","tokens"} -> {"prompt"}) inverts /tokenize;
// unknown models, a missing tokens field and ids outside the vocabulary are refused.
func TestDetokenize(t *testing.T) {
	ti := startInstance(t, instOpts{lora: sqlLoRA})
	for _, text := range []string{"Hello world", "héllo 世界 🎉\n<|im_start|>user"} {
		code, b := ti.post(t, "/tokenize", `{"model":"qwen3","prompt":`+jsonQuote(text)+`,"add_special_tokens":false}`)
		if code != 200 {
			t.Fatalf("tokenize: %d %s", code, b)
		}
		var tk struct{ Tokens []uint32 }
		decodeJSON(t, b, &tk)
		code, b = ti.post(t, "/detokenize", `{"model":"sql-lora","tokens":`+idList(tk.Tokens)+`}`)
		var dt struct{ Prompt string }
		decodeJSON(t, b, &dt)
		if code != 200 || dt.Prompt != text {
			t.Fatalf("detokenize(tokenize(%q)) = %d %q", text, code, dt.Prompt)
		}
	}
	if code, b := ti.post(t, "/detokenize", `{"model":"qwen3","tokens":[9707,1879]}`); code != 200 || string(b) != "{\"prompt\":\"Hello world\"}\n" {
		t.Fatalf("docs/vllm-facts.md §g: %d %s", code, b)
	}
	for body, want := range map[string]int{
		`{"model":"gpt","tokens":[1]}`:         404,
		`{"model":"qwen3"}`:                    400,
		`{"model":"qwen3","tokens":[9999999]}`: 400,
		`{"tokens":[`:                          400,
	} {
		if code, b := ti.post(t, "/detokenize", body); code != want {
			t.Errorf("%s: %d %s, want %d", body, code, b, want)
		}
	}
}

// jsonQuote is s as a JSON string.
func jsonQuote(s string) string {
	b, _ := json.Marshal(s) // a string always encodes
	return string(b)
}

func idList(ids []uint32) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.FormatUint(uint64(id), 10)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// TestLoRAEventsCreditedByRouter: vllm-sim publishes an adapter's blocks as vLLM 0.32 does
// (lora_id, lora_name, extra_keys [[name], ...]); the router's real ZMQ subscriber and
// decoder index them under the adapter, so route credits a request for the adapter with them
// and a request for the base model with none, and the other way round.
func TestLoRAEventsCreditedByRouter(t *testing.T) {
	ti := startInstance(t, instOpts{events: true, format: FormatMap, hashes: HashInt, lora: sqlLoRA})
	ix, g := routerIndex(t)
	addStream(t, g, kvzmq.StreamConfig{Worker: "sim-0", Endpoint: ti.pub, ReplayEndpoint: ti.replay, Topic: "kv"})
	p, err := pool.New(pool.Config{BlockSize: 16, Workers: []pool.WorkerConfig{{Name: "sim-0", Role: pool.RoleDecode,
		Endpoint: strings.TrimPrefix(ti.url, "http://"), NumGPUBlocks: 1000}}}, pool.Options{Metrics: pool.NewMetrics(prometheus.NewRegistry())})
	if err != nil {
		t.Fatal(err)
	}
	pc := policy.DefaultConfig()
	r, err := route.New(route.Options{Models: []route.Model{{Name: "qwen3", LoRAAdapters: []string{"sql-lora"},
		Tokenizer: ti.tok, Index: ix, Pool: p}}, Policy: &pc, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	credit := func(model, prompt string) int {
		out, err := r.Decide(context.Background(), &route.Request{Endpoint: route.EndpointCompletions, DryRun: true,
			Body: []byte(`{"model":"` + model + `","prompt":` + prompt + `}`)})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range out.Overlaps {
			if o.Worker == "sim-0" {
				return o.GPU
			}
		}
		return 0
	}
	waitLive(t, ti, g, ix, "qwen3", 0)
	_, a := tokenPrompt(100, 1000) // 6 full blocks of 16
	_, b := tokenPrompt(40, 5000)  // 2
	ti.post(t, "/v1/completions", `{"model":"sql-lora","prompt":`+a+`,"max_tokens":1}`)
	ti.post(t, "/v1/completions", `{"model":"qwen3","prompt":`+b+`,"max_tokens":1}`)
	waitIndex(t, g, func() bool { return credit("sql-lora", a) == 6 && credit("qwen3", b) == 2 })
	if got := []int{credit("qwen3", a), credit("sql-lora", b)}; got[0] != 0 || got[1] != 0 {
		t.Fatalf("cross-adapter credit: base on the adapter's prompt %d, adapter on the base prompt %d; want 0 0", got[0], got[1])
	}
	if st := g.Status()[0]; st.Dropped != 0 {
		t.Fatalf("stream status %+v", st)
	}
}

// TestEncoderLoRAStore: an adapter's BlockStored is the 11-key map of vLLM 0.32 (fixture
// store_lora, docs/vllm-facts.md §b, §d) and decodes with lora_id, lora_name and every block
// plain under the adapter.
func TestEncoderLoRAStore(t *testing.T) {
	ev := sim.Event{Kind: sim.EventBlockStored, Hashes: []uint64{11, 12}, Tokens: seqTokens(4, 1),
		LoRA: sim.Adapter{ID: 1, Name: "sql-lora", Path: "/a"}}
	for _, f := range []EventFormat{FormatMap, FormatArray} {
		var bt kvevents.Batch
		if err := kvevents.DecodeBatch(Encoder{Format: f, BlockSize: 2}.AppendBatch(nil, 1, []sim.Event{ev}), &bt); err != nil {
			t.Fatal(err)
		}
		st := bt.Events[0]
		if st.Malformed || !st.HasLoRAID || st.LoRAID != 1 || string(st.LoRAName) != "sql-lora" || st.PlainBlocks != 2 {
			t.Fatalf("format %d: decoded %+v", f, st)
		}
	}
	got := Encoder{Format: FormatMap, BlockSize: 2}.appendStored(nil, &ev)
	var keys []string
	for _, k := range []string{"type", "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium",
		"lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind"} {
		keys = append(keys, k)
		if !strings.Contains(string(got), k) {
			t.Fatalf("key %s missing", k)
		}
	}
	if got[0] != 0x80|byte(len(keys)) {
		t.Fatalf("map header % x, want an %d-key map", got[0], len(keys))
	}
	if !strings.Contains(string(got), "\xaaextra_keys\x92\x91\xa8sql-lora\x91\xa8sql-lora") {
		t.Fatalf("extra_keys is not [[name], [name]]: % x", got)
	}
}
