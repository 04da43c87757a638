package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/condisagg/condisagg/internal/repo"
	condisaggv1 "github.com/condisagg/condisagg/proto/condisagg/v1"
	"github.com/condisagg/condisagg/server"
)

// listenAddrs are the bound addresses of one serve (server.Addrs).
type listenAddrs struct{ grpc, adminGRPC, http string }

// serveHooks are the tests' observers of one serve (server.Hooks).
type serveHooks struct {
	listening func(listenAddrs)
	extProc   func(*grpc.Server)
	reloaded  func(trigger string, err error)
}

// runServe runs `condisagg serve` as main does, with the test's hooks.
func runServe(ctx context.Context, args []string, stderr io.Writer, h serveHooks) int {
	hooks := server.Hooks{ExtProc: h.extProc, Reloaded: h.reloaded}
	if h.listening != nil {
		hooks.Listening = func(a server.Addrs) { h.listening(listenAddrs{grpc: a.GRPC, adminGRPC: a.AdminGRPC, http: a.HTTP}) }
	}
	return server.Run(ctx, args, stderr, hooks)
}

// requireModel is the Qwen3 tokenizer directory of the test models.
func requireModel(t *testing.T) string { return repo.TestModel(t, "qwen3") }

func writeFile(t *testing.T, dir, name, text string) string {
	return repo.WriteFile(t, dir, name, text)
}

const workersYAML = `workers:
  - {name: prefill-0, role: prefill, endpoint: 127.0.0.1:8100, max_num_batched_tokens: 8192}
  - {name: decode-0, role: decode, endpoint: 127.0.0.1:8200, num_gpu_blocks: 40000}
`

// decideHeaders plays Envoy for one BUFFERED chat request (request headers plus extra header
// pairs, then the whole body), ends the stream, and returns the headers the decision set.
func decideHeaders(t *testing.T, conn *grpc.ClientConn, body string, extra ...string) map[string]string {
	t.Helper()
	stream, err := extprocv3.NewExternalProcessorClient(conn).Process(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	hdrs := &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
		{Key: ":method", RawValue: []byte("POST")}, {Key: ":path", RawValue: []byte("/v1/chat/completions")}}}
	for i := 0; i+1 < len(extra); i += 2 {
		hdrs.Headers = append(hdrs.Headers, &corev3.HeaderValue{Key: extra[i], RawValue: []byte(extra[i+1])})
	}
	set := map[string]string{}
	for _, req := range []*extprocv3.ProcessingRequest{
		{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: hdrs}}},
		{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: []byte(body), EndOfStream: true}}},
	} {
		if err := stream.Send(req); err != nil {
			t.Fatal(err)
		}
		r, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range r.GetRequestBody().GetResponse().GetHeaderMutation().GetSetHeaders() {
			set[h.GetHeader().GetKey()] = string(h.GetHeader().GetRawValue())
		}
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != io.EOF {
		t.Fatalf("stream end: %v", err)
	}
	return set
}

// dpServeConfig is serve's test config with KV events on and one decode worker of two
// data-parallel ranks at simAddr, publishing on ports pub and pub+1, replaying on rep and rep+1.
func dpServeConfig(model, simAddr string, pub, rep int) string {
	cfg := strings.Replace(serveYAML, "MODEL", model, 1)
	return strings.Replace(cfg, "kv_events: false", "kv_events: true", 1) + fmt.Sprintf(`workers:
  - {name: decode-0, role: decode, endpoint: %s, num_gpu_blocks: 1000, data_parallel_size: 2,
     kv_events: "tcp://127.0.0.1:%d", kv_replay: "tcp://127.0.0.1:%d"}
`, simAddr, pub, rep)
}

// adminClient is a client of a's Admin gRPC listener, closed with the test.
func adminClient(t *testing.T, a listenAddrs) condisaggv1.AdminClient {
	t.Helper()
	conn, err := grpc.NewClient(a.adminGRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return condisaggv1.NewAdminClient(conn)
}

// workersByID lists the router's workers (Admin ListWorkers) by id.
func workersByID(t *testing.T, ctx context.Context, admin condisaggv1.AdminClient) map[string]*condisaggv1.Worker {
	t.Helper()
	lw, err := admin.ListWorkers(ctx, &condisaggv1.ListWorkersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]*condisaggv1.Worker{}
	for _, w := range lw.Workers {
		m[w.Id] = w
	}
	return m
}

// chatToRank posts a chat body straight to the vllm-sim at simAddr, pinned to a data-parallel
// rank with x-data-parallel-rank, and fails unless it answers 200.
func chatToRank(t *testing.T, ctx context.Context, simAddr, body, rank string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+simAddr+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("x-data-parallel-rank", rank)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("vllm-sim answered %d", resp.StatusCode)
	}
}

// routingYAML is serveYAML for model with KV events and conditional disaggregation on and the
// given config lines (two-space indented, under router) after them.
func routingYAML(model, config string) string {
	yaml := strings.Replace(serveYAML, "MODEL", model, 1)
	return strings.Replace(yaml, "  kv_events: false\n  conditional_disagg: false\n",
		"  kv_events: true\n  conditional_disagg: true\n"+config, 1)
}
