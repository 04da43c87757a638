package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/condisagg/condisagg/envoy"
	condisaggv1 "github.com/condisagg/condisagg/proto/condisagg/v1"
)

// attackKV is what a client would send to make a decode worker pull KV from a host it chose
// (issue 23 item 1): vLLM 0.32 accepts it on /v1/responses, /v1/messages and
// /inference/v1/generate, the passthrough paths, and vllm_xargs and ec_transfer_params reach
// the same extra_args.
const attackKV = `"kv_transfer_params":{"do_remote_prefill":true,"remote_engine_id":"attacker-engine",` +
	`"remote_host":"10.9.9.9","remote_port":5600,"remote_block_ids":[1,2,3]},` +
	`"vllm_xargs":{"kv_transfer_params":"x","kv_cache_report_mode":"full"},"ec_transfer_params":{"remote_host":"10.9.9.9"}`

// testEngineControlEveryPath: on every passthrough path, through the BUFFERED fail-open Envoy,
// the full-duplex Envoy and a STREAMED Envoy (fail-closed, no Lua guard: condisagg alone), a
// body carrying kv_transfer_params, vllm_xargs and ec_transfer_params reaches the decode worker
// without them and with everything else (vllm-sim answers those paths with the body it got);
// a body that is not one JSON object gets vLLM's 400 and reaches no worker.
func testEngineControlEveryPath(t *testing.T, s *Stack) {
	ctx := scenarioCtx(t)
	bin, err := envoy.FindBinary()
	if err != nil {
		t.Fatal(err)
	}
	p := envoy.Params{Mode: envoy.Streamed, FailOpen: envoy.FailClosed, Proxy: envoy.Proxy{HealthCheckInterval: time.Second}}
	if p.ExtProc, err = envoy.ParseEndpoint(s.GRPCAddr); err != nil {
		t.Fatal(err)
	}
	streamed, err := s.startEnvoy(ctx, bin, "streamed", p)
	if err != nil {
		t.Fatal(err)
	}
	defer streamed.Stop()
	envs := map[string]*envoy.Process{"buffered": s.Envoy, "full_duplex": s.EnvoyDuplex, "streamed": streamed}
	reached := 0
	for name, env := range envs {
		for _, path := range []string{"/v1/responses", "/v1/messages", "/inference/v1/generate"} {
			body := []byte(`{"model":"qwen3","input":"tell me","max_tokens":8,` + attackKV + `,"stream":false}`)
			r, err := s.Post(ctx, "http://"+env.ListenerAddr("llm")+path, body, nil)
			if err != nil {
				t.Fatal(err)
			}
			var got struct{ Object, Path, Body string }
			if r.Status != http.StatusOK || json.Unmarshal(r.Body, &got) != nil || got.Object != "vllm-sim.received" {
				t.Fatalf("%s %s: status %d %s; want the worker's echo", name, path, r.Status, r.Body)
			}
			reached++
			if r.Decision.Route != "decode" || r.Decision.Reason != "passthrough" {
				t.Errorf("%s %s: decision %q; want decode/passthrough", name, path, r.Decision.Raw)
			}
			var members map[string]any
			if err := json.Unmarshal([]byte(got.Body), &members); err != nil {
				t.Fatalf("%s %s: the worker got %q, not JSON: %v", name, path, got.Body, err)
			}
			for _, k := range []string{"kv_transfer_params", "vllm_xargs", "ec_transfer_params"} {
				if _, ok := members[k]; ok {
					t.Errorf("%s %s: the decode worker received the client's %s: %s", name, path, k, got.Body)
				}
			}
			if members["input"] != "tell me" || members["model"] != "qwen3" || members["max_tokens"] != float64(8) {
				t.Errorf("%s %s: the worker got %s; want the other members intact", name, path, got.Body)
			}
		}
		before, err := s.Served(ctx)
		if err != nil {
			t.Fatal(err)
		}
		r, err := s.Post(ctx, "http://"+env.ListenerAddr("llm")+"/v1/responses", []byte(`{"model":"qwen3",`+attackKV), nil)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != http.StatusBadRequest || !bytes.Contains(r.Body, []byte(`"code":400`)) || bytes.Contains(r.Body, []byte("vllm-sim.received")) {
			t.Errorf("%s: truncated body: status %d %s; want vLLM's 400 from the router", name, r.Status, r.Body)
		}
		if after, _ := s.Served(ctx); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Errorf("%s: an unreadable body reached a worker", name)
		}
	}
	t.Logf("%d attack bodies reached a decode worker, none with an engine-control member", reached)
}

// testCaseVariantKeys: routing fields are read with exact keys as vLLM reads them (issue 23
// item 4). {"prompt": <fresh long text>, "PROMPT": <text decode worker D holds>} is routed on
// the long prompt the engine runs (remote, its own ISL), not as a bypass to D; "MODEL" beside
// "model" does not pick another model; bodies vLLM accepts (a BOM, NaN, "stream":"true", token
// ids written as floats) are routed, not refused.
func testCaseVariantKeys(t *testing.T, s *Stack) {
	ctx := scenarioCtx(t)
	url := "http://" + s.Envoy.ListenerAddr("llm") + "/v1/completions"
	cached, fresh := Words(1401, 2200), Words(1402, 2600)
	completion := func(fields string) []byte {
		return []byte(`{"model":"qwen3","max_tokens":8,"stream":false,` + fields + `}`)
	}
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	r1, err := s.Post(ctx, url, completion(`"prompt":`+q(cached)), nil)
	if err != nil || r1.Status != http.StatusOK {
		t.Fatalf("turn 1: %v %+v", err, r1)
	}
	wantDecision(t, r1, "prefill", "remote_isl_too_long")
	explainCompletion := func(body []byte) *condisaggv1.ExplainResponse {
		ex := &condisaggv1.ExplainResponse{}
		if err := s.client(ctx, body, ex, "explain", "--addr", s.AdminGRPC, "-o", "json", "--path", "/v1/completions", "--body", "@-"); err != nil {
			t.Fatal(err)
		}
		return ex
	}
	var holder string
	if err := Poll(ctx, func() error {
		ex := explainCompletion(completion(`"prompt":` + q(cached)))
		if ex.Route != "decode" {
			return fmt.Errorf("turn 1 not indexed yet: %s/%s", ex.Route, ex.Reason)
		}
		holder = ex.DecodeWorker
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	freshISL := explainCompletion(completion(`"prompt":` + q(fresh))).Tokens
	attack := completion(`"prompt":` + q(fresh) + `,"PROMPT":` + q(cached))
	r, err := s.Post(ctx, url, attack, nil)
	if err != nil || r.Status != http.StatusOK {
		t.Fatalf("attack: %v %+v", err, r)
	}
	if r.Decision.Route != "prefill" || r.Decision.Reason != "remote_isl_too_long" || r.Decision.ISL != int(freshISL) {
		t.Fatalf("prompt+PROMPT: decision %q; want prefill/remote_isl_too_long on the engine's prompt (isl %d), not the text %s holds",
			r.Decision.Raw, freshISL, holder)
	}
	// "MODEL" beside "model" (the slow path: stream_options.include_usage). The router must route
	// it for qwen3, the model vLLM reads; it refused it as an unknown model before. (vllm-sim
	// itself decodes bodies with encoding/json and answers for "MODEL": only the router's part
	// is checked here.)
	chat := ChatBody([]Message{{Role: "user", Content: Words(1403, 60)}}, maxTokens)
	chat = append(bytes.TrimSuffix(chat, []byte("}")), `,"MODEL":"gpt-4o"}`...)
	if r, err := s.Chat(ctx, chat, nil); err != nil || r.Header.Get("x-condisagg-error") != "" || r.Decision.Route == "" {
		t.Fatalf("model+MODEL: %v %+v; want qwen3's decision (the model field), not the router's refusal", err, r)
	}
	for name, body := range map[string]string{
		"bom":           "\xef\xbb\xbf" + string(completion(`"prompt":"hello there"`)),
		"nan":           string(completion(`"prompt":"hello there","temperature":NaN`)),
		"string_stream": `{"model":"qwen3","max_tokens":8,"prompt":"hello there","stream":"false"}`,
		"float_ids":     string(completion(`"prompt":[9707.0,1052,"1879"]`)),
	} {
		// The router's part: decided (a policy decision echoed on the answer, not a refusal, which
		// carries no decision, nor failure_open). What the stand-ins behind it make of such bodies
		// is theirs: vllm-sim decodes with encoding/json and pd-sidecar refuses a BOM and NaN,
		// where vLLM accepts all four.
		r, err := s.Post(ctx, url, []byte(body), nil)
		if err != nil || r.Decision.Route == "" ||
			strings.Contains(r.Decision.Reason, "failure") || strings.Contains(r.Decision.Reason, "passthrough") {
			t.Errorf("%s: %v status %d decision %q %s; want a routing decision, as vLLM accepts it", name, err, r.Status, r.Decision.Raw, r.Body)
		}
	}
}
