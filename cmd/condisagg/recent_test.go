package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/condisagg/condisagg/server/statuspage"
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

// TestSteadyStateShown: under the slo policy with slo_fleet (its default), a decision made once
// the fleet view has a second of history carries the steady state it was decided in, in
// `condisagg recent` (table and JSON) and on the status page; the first decision, with no
// history yet, carries none.
func TestSteadyStateShown(t *testing.T) {
	model := requireModel(t)
	cfg := strings.Replace(serveYAML, "MODEL", model, 1)
	cfg = strings.Replace(cfg, "kv_events: false", "kv_events: true", 1)
	cfg = strings.Replace(cfg, "conditional_disagg: false", "conditional_disagg: true\n  conditional_disagg_config: {policy: slo, cost_model: llama3.1-8b-h100}", 1)
	a := startServe(t, cfg+workersYAML)
	conn, err := grpc.NewClient(a.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"model":"qwen3","messages":[{"role":"user","content":"how busy is the fleet?"}]}`
	routeRequest(t, conn, "req-first", body)
	time.Sleep(1100 * time.Millisecond) // the view's least history (fleet.minSpan)
	routeRequest(t, conn, "req-second", body)

	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"recent", "--addr", a.adminGRPC, "-n", "2"}, &out, &errOut); code != 0 {
		t.Fatalf("recent exit %d: %s", code, errOut.String())
	}
	t.Logf("recent:\n%s", out.String())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 || !strings.Contains(lines[2], "req-second") || !strings.Contains(lines[3], "req-first") {
		t.Fatalf("recent table:\n%s", out.String())
	}
	if !strings.Contains(lines[2], "(prefill util agg ") || !strings.HasSuffix(lines[3], " -") {
		t.Errorf("STEADY STATE: want a regime on the second decision and none on the first:\n%s", out.String())
	}

	out.Reset()
	if code := run(context.Background(), []string{"recent", "--addr", a.adminGRPC, "-n", "1", "-o", "json"}, &out, &errOut); code != 0 {
		t.Fatalf("recent -o json exit %d: %s", code, errOut.String())
	}
	var js struct {
		Decisions []struct {
			Fleet *struct {
				WindowMs   float64 `json:"windowMs"`
				DecodePool struct {
					Requests float64 `json:"requests"`
				} `json:"decodePool"`
				PrefillPool struct {
					Requests float64 `json:"requests"`
				} `json:"prefillPool"`
				Aggregated struct {
					Valid bool `json:"valid"`
				} `json:"aggregated"`
			} `json:"fleet"`
		} `json:"decisions"`
	}
	if err := json.Unmarshal(out.Bytes(), &js); err != nil || len(js.Decisions) != 1 || js.Decisions[0].Fleet == nil {
		t.Fatalf("recent json (%v):\n%s", err, out.String())
	}
	f := js.Decisions[0].Fleet
	// One placement (the first request) in about 1.1 s of history.
	if f.WindowMs < 1000 || f.DecodePool.Requests+f.PrefillPool.Requests <= 0 || !f.Aggregated.Valid {
		t.Errorf("recent json fleet %+v: want >= 1 s of window, the first placement counted and a valid aggregated regime", *f)
	}

	_, b := uiGet(t, a.http, "/ui/api/state", "")
	var st statuspage.State
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatalf("%v:\n%s", err, b)
	}
	if len(st.Decisions.Latest) != 2 || st.Decisions.Latest[0].Inputs == nil || st.Decisions.Latest[1].Inputs == nil {
		t.Fatalf("status page decisions: %s", b)
	}
	second, first := st.Decisions.Latest[0].Inputs.Fleet, st.Decisions.Latest[1].Inputs.Fleet
	if first != nil || second == nil || second.WindowSeconds < 1 || second.Decode.Requests+second.Prefill.Requests <= 0 {
		t.Errorf("status page fleet: first %+v, second %+v; want none, then the view", first, second)
	}
}
