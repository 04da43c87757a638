package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/condisagg/condisagg/internal/repo"
)

const modelsServeYAML = `listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
admin_grpc_listen: 127.0.0.1:0
drain_timeout: 5s
pool: {health_interval: -1s} # the workers below are addresses nobody serves
router: {mode: kv, kv_events: true, conditional_disagg: false} # one event group per model (no streams here)
unknown_model: reject
models:
  - name: qwen3
    tokenizer: QWEN
    block_size: 16
    lora_adapters: [sql-lora]
    workers:
      - {name: q-prefill-0, role: prefill, endpoint: 127.0.0.1:8100}
      - {name: q-decode-0, role: decode, endpoint: 127.0.0.1:8200}
  - name: llama3
    tokenizer: LLAMA
    block_size: 32
    workers:
      - {name: l-prefill-0, role: prefill, endpoint: 127.0.0.1:8300}
      - {name: l-decode-0, role: decode, endpoint: 127.0.0.1:8400}
`

// extProcSend plays Envoy for one BUFFERED chat request on the binary's gRPC port and returns
// the answer to the body (a routed body response or an immediate response).
func extProcSend(t *testing.T, conn *grpc.ClientConn, body string) *extprocv3.ProcessingResponse {
	t.Helper()
	stream, err := extprocv3.NewExternalProcessorClient(conn).Process(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer stream.CloseSend()
	hdrs := &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
		{Key: ":method", RawValue: []byte("POST")}, {Key: ":path", RawValue: []byte("/v1/chat/completions")}}}
	if err := stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: hdrs}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: []byte(body), EndOfStream: true}}}); err != nil {
		t.Fatal(err)
	}
	r, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func routedHeaders(r *extprocv3.ProcessingResponse) map[string]string {
	set := map[string]string{}
	for _, h := range r.GetRequestBody().GetResponse().GetHeaderMutation().GetSetHeaders() {
		set[h.GetHeader().GetKey()] = string(h.GetHeader().GetRawValue())
	}
	return set
}

// TestServeModels: serve with two models of different block sizes routes each request to its
// model's workers (an adapter to its base model's), answers an unknown model with vLLM's 404
// over the real ext_proc port, and names the model in Explain, ListWorkers, /readyz and the
// per-model pool metrics.
func TestServeModels(t *testing.T) {
	cfg := strings.NewReplacer("QWEN", requireModel(t), "LLAMA", repo.TestModel(t, "llama3")).Replace(modelsServeYAML)
	a := startServe(t, cfg)
	conn, err := grpc.NewClient(a.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	chat := func(model string) string {
		return `{"model":"` + model + `","messages":[{"role":"user","content":"hello"}]}`
	}
	for model, decode := range map[string]string{"qwen3": "127.0.0.1:8200", "sql-lora": "127.0.0.1:8200", "llama3": "127.0.0.1:8400"} {
		if h := routedHeaders(extProcSend(t, conn, chat(model))); h["x-condisagg-decode-host"] != decode {
			t.Fatalf("model %s routed to %v, want decode host %s", model, h, decode)
		}
	}
	ir := extProcSend(t, conn, chat("gpt-4o")).GetImmediateResponse()
	want := "{\"error\":{\"message\":\"The model `gpt-4o` does not exist.\",\"type\":\"NotFoundError\",\"param\":\"model\",\"code\":404}}"
	if ir == nil || ir.GetStatus().GetCode() != 404 || string(ir.GetBody()) != want {
		t.Fatalf("unknown model: %v", ir)
	}

	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"explain", "--addr", a.adminGRPC, "--body", chat("sql-lora")}, &out, &errOut); code != 0 ||
		!strings.Contains(out.String(), "qwen3 (adapter sql-lora)") {
		t.Fatalf("explain exit %d:\n%s%s", code, out.String(), errOut.String())
	}
	out.Reset()
	if code := run(context.Background(), []string{"workers", "--addr", a.adminGRPC}, &out, &errOut); code != 0 ||
		!strings.Contains(out.String(), "MODEL") || !strings.Contains(out.String(), "llama3  l-decode-0") {
		t.Fatalf("workers exit %d:\n%s%s", code, out.String(), errOut.String())
	}
	get := func(path string) string {
		resp, err := http.Get("http://" + a.http + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	resp, err := http.Post("http://"+a.http+"/debug/explain?path=/v1/chat/completions", "application/json", strings.NewReader(chat("gpt-4o")))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("/debug/explain for an unknown model: %d, want 404", resp.StatusCode)
	}
	if text := get("/readyz"); !strings.Contains(text, "model llama3: l-decode-0 decode healthy") {
		t.Fatalf("/readyz:\n%s", text)
	}
	metrics := get("/metrics")
	for _, want := range []string{`condisagg_pool_workers{model="llama3",role="decode"} 1`, `condisagg_unknown_model_requests_total{action="reject"} 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
