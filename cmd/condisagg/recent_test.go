package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestRecentCommand: `condisagg recent` against a served router. Two remote-prefill requests
// go through ext_proc with their decode answers: one reports L-1 cached tokens (transferred),
// the other fewer (recomputed); the table and the JSON show each decision with its outcome,
// newest first, and a limit above the bound fails naming the flag's field.
func TestRecentCommand(t *testing.T) {
	model := requireModel(t)
	a := startServe(t, routingYAML(model, "  conditional_disagg_config: {policy: isl_bounding}\n")+workersYAML)
	conn, err := grpc.NewClient(a.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	answeredRemote(t, conn, "req-transferred", `{"prompt_tokens":40,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":39}}`)
	answeredRemote(t, conn, "req-recomputed", `{"prompt_tokens":40,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":7}}`)

	ctx := context.Background()
	var out, errOut bytes.Buffer
	if code := run(ctx, []string{"recent", "--addr", a.adminGRPC, "-n", "5"}, &out, &errOut); code != 0 {
		t.Fatalf("recent exit %d: %s", code, errOut.String())
	}
	t.Logf("recent:\n%s", out.String())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "2 decisions routed") || !strings.HasPrefix(lines[1], "SEQ") {
		t.Fatalf("recent table:\n%s", out.String())
	}
	for i, want := range [][]string{{"req-recomputed", "prefill", "prefill-0", "decode-0", "recomputed", "7/40"},
		{"req-transferred", "prefill", "prefill-0", "decode-0", "transferred", "39/40"}} {
		for _, f := range want {
			if !strings.Contains(" "+lines[2+i]+" ", " "+f+" ") {
				t.Errorf("row %d lacks %q:\n%s", i, f, out.String())
			}
		}
	}

	out.Reset()
	if code := run(ctx, []string{"recent", "--addr", a.adminGRPC, "-n", "1", "-o", "json"}, &out, &errOut); code != 0 {
		t.Fatalf("recent -o json exit %d: %s", code, errOut.String())
	}
	var js struct {
		Total     string `json:"total"`
		Decisions []struct {
			RequestID            string `json:"requestId"`
			Transfer             string `json:"transfer"`
			TransferCachedTokens string `json:"transferCachedTokens"`
		} `json:"decisions"`
	}
	if err := json.Unmarshal(out.Bytes(), &js); err != nil || js.Total != "2" || len(js.Decisions) != 1 ||
		js.Decisions[0].RequestID != "req-recomputed" || js.Decisions[0].Transfer != "recomputed" || js.Decisions[0].TransferCachedTokens != "7" {
		t.Fatalf("recent json (%v):\n%s", err, out.String())
	}

	errOut.Reset()
	if code := run(ctx, []string{"recent", "--addr", a.adminGRPC, "-n", "1001"}, &out, &errOut); code != 1 ||
		!strings.Contains(errOut.String(), "limit: 1001 is above the maximum 1000") {
		t.Fatalf("recent -n 1001: exit %d: %s", code, errOut.String())
	}
}

// answeredRemote plays Envoy for one BUFFERED chat request routed to remote prefill and its
// non-streamed decode answer carrying usage.
func answeredRemote(t *testing.T, conn *grpc.ClientConn, requestID, usage string) {
	t.Helper()
	stream, err := extprocv3.NewExternalProcessorClient(conn).Process(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	hv := func(kv ...string) *corev3.HeaderMap {
		m := &corev3.HeaderMap{}
		for i := 0; i+1 < len(kv); i += 2 {
			m.Headers = append(m.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
		}
		return m
	}
	answer := `{"choices":[{"message":{"content":"x"},"finish_reason":"stop"}],"usage":` + usage + `}`
	for i, req := range []*extprocv3.ProcessingRequest{
		{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			Headers: hv(":method", "POST", ":path", "/v1/chat/completions", "x-request-id", requestID)}}},
		{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{
			Body: []byte(`{"model":"qwen3","messages":[{"role":"user","content":"hello"}]}`), EndOfStream: true}}},
		{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
			Headers: hv(":status", "200", "content-type", "application/json", "x-condisagg-kv-transfer", "pulled")}}},
		{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: []byte(answer), EndOfStream: true}}},
	} {
		if err := stream.Send(req); err != nil {
			t.Fatal(err)
		}
		r, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			if route := routeHeader(r); route != "prefill" {
				t.Fatalf("%s: route %q, want prefill", requestID, route)
			}
		}
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != io.EOF {
		t.Fatalf("stream end: %v", err)
	}
}

func routeHeader(r *extprocv3.ProcessingResponse) string {
	for _, h := range r.GetRequestBody().GetResponse().GetHeaderMutation().GetSetHeaders() {
		if h.GetHeader().GetKey() == "x-condisagg-route" {
			return string(h.GetHeader().GetRawValue())
		}
	}
	return ""
}
