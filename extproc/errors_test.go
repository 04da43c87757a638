package extproc

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/structpb"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/condisagg/condisagg/route"
	"github.com/condisagg/condisagg/tokenizer"
)

// brokenTokenizer fails every chat the way a model without a chat template does, or panics.
type brokenTokenizer struct{ panics bool }

func (b brokenTokenizer) EncodeChat(dst []uint32, _ []byte, _ tokenizer.ChatOptions) ([]uint32, error) {
	if b.panics {
		panic("tokenizer bug")
	}
	return dst, fmt.Errorf("render: %w", tokenizer.ErrNoChatTemplate)
}

func (b brokenTokenizer) EncodeCompletion(dst []uint32, _ []byte) ([]uint32, error) {
	return append(dst, 1, 2, 3), nil
}

// expectImmediate checks an immediate response: status, OpenAI JSON body, headers.
func expectImmediate(t *testing.T, r *extprocv3.ProcessingResponse, status int, reason string) string {
	t.Helper()
	ir := r.GetImmediateResponse()
	if ir == nil {
		t.Fatalf("want an immediate %d response, got %v", status, r)
	}
	if int(ir.GetStatus().GetCode()) != status || ir.GetDetails() != "condisagg_"+reason {
		t.Fatalf("status %v details %q, want %d condisagg_%s", ir.GetStatus().GetCode(), ir.GetDetails(), status, reason)
	}
	var body errorBody
	wantCode := strconv.Quote(reason)
	if reason == "unknown_model" || reason == "unreadable_body" || reason == "prompt_too_long" { // vLLM's own answer: the status as a number
		wantCode = strconv.Itoa(status)
	}
	if err := json.Unmarshal(ir.GetBody(), &body); err != nil || string(body.Error.Code) != wantCode || body.Error.Message == "" {
		t.Fatalf("body %s: %v", ir.GetBody(), err)
	}
	h := map[string]string{}
	for _, hv := range ir.GetHeaders().GetSetHeaders() {
		h[hv.GetHeader().GetKey()] = string(hv.GetHeader().GetRawValue())
	}
	if h["content-type"] != "application/json" || h[HeaderError] != reason {
		t.Fatalf("headers %v", h)
	}
	if (status == 503) != (h["retry-after"] == "1") {
		t.Fatalf("retry-after %q on %d", h["retry-after"], status)
	}
	return body.Error.Message
}

// TestInvalidBody400: malformed JSON, no model, no messages/prompt, tokenizer refusals.
func TestInvalidBody400(t *testing.T) {
	e := newEnv(t, envOptions{})
	cases := []struct{ path, body, want string }{
		{chatPath, `{"model":"m","messages":[`, "not a valid JSON object"},
		{chatPath, `{"messages":[{"role":"user","content":"x"}]}`, `"model"`},
		{chatPath, `{"model":"m"}`, `"messages"`},
		{"/v1/completions", `{"model":"m"}`, `"prompt"`},
		{"/v1/completions", `{"model":"m","prompt":["a","b"]}`, "more than one sequence"},
		{chatPath, `{"model":"m","messages":[{"role":"user","content":{"x":1}}]}`, ""},
	}
	for _, mode := range []filterv3.ProcessingMode_BodySendMode{buffered, fullDuplex} {
		for _, c := range cases {
			v := e.open(mode, streamed)
			v.requestHeaders(false, ":method", "POST", ":path", c.path)
			if mode == buffered {
				v.recv()
			}
			v.requestBody([]byte(c.body), true)
			msg := expectImmediate(t, v.recv(), 400, "invalid_body")
			if !strings.Contains(msg, c.want) {
				t.Fatalf("%v %s: message %q lacks %q", mode, c.body, msg, c.want)
			}
			v.requestBody([]byte("ignored"), true) // after an immediate response nothing is answered
			v.closeAndDrain()
		}
	}
	if e.totalRequests() != 0 {
		t.Fatal("a rejected request was booked")
	}
}

// TestBodyTooLarge413: the limit is checked per chunk before the end of the body.
func TestBodyTooLarge413(t *testing.T) {
	e := newEnv(t, envOptions{settings: func(s *Settings) { s.MaxBodyBytes = 1000 }})
	v := e.open(fullDuplex, streamed)
	v.requestHeaders(false, ":method", "POST", ":path", chatPath)
	body := sizedChatBody(1500)
	v.requestBody(body[:600], false)
	v.requestBody(body[600:1200], false)
	expectImmediate(t, v.recv(), 413, "body_too_large")
	v.requestBody(body[1200:], true)
	v.closeAndDrain()

	v = e.open(buffered, streamed)
	v.requestHeaders(false, ":method", "POST", ":path", chatPath)
	v.recv()
	v.requestBody(body, true)
	expectImmediate(t, v.recv(), 413, "body_too_large")
	v.closeAndDrain()
	if got := testutil.ToFloat64(e.metrics.Rejected.WithLabelValues("body_too_large")); got != 2 {
		t.Fatalf("rejected{body_too_large} = %v", got)
	}
}

// TestNoEligibleWorker503: no healthy decode worker.
func TestNoEligibleWorker503(t *testing.T) {
	e := newEnv(t, envOptions{})
	for _, id := range []string{"decode-0", "decode-1"} {
		if err := e.pool.SetHealth(id, false); err != nil {
			t.Fatal(err)
		}
	}
	v := e.open(buffered, streamed)
	v.requestHeaders(false, ":method", "POST", ":path", chatPath)
	v.recv()
	v.requestBody(chatBody("hi", false), true)
	expectImmediate(t, v.recv(), 503, "no_eligible_worker")
	v.closeAndDrain()
	v = e.open(buffered, streamed)
	v.requestHeaders(true, ":method", "GET", ":path", "/v1/models")
	expectImmediate(t, v.recv(), 503, "no_eligible_worker")
	v.closeAndDrain()
}

func subsetMetadata(list ...string) *corev3.Metadata {
	vals := make([]any, len(list))
	for i, s := range list {
		vals[i] = s
	}
	st, _ := structpb.NewStruct(map[string]any{SubsetKey: vals})
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{SubsetNamespace: st}}
}

// TestSubsetHint: envoy-extproc.md §2 — the hint restricts the workers by IP (any port);
// empty or unmatched is 503 subset_no_match. The destination (header and envoy.lb metadata) is
// always a listed endpoint: a hint without the prefill worker rules out remote prefill, whose
// destination is the prefill worker (endpoint picker protocol: only listed endpoints may be
// picked).
func TestSubsetHint(t *testing.T) {
	e := newEnv(t, envOptions{})
	run := func(md *corev3.Metadata) *extprocv3.ProcessingResponse {
		v := e.open(buffered, streamed)
		v.send(&extprocv3.ProcessingRequest{MetadataContext: md, Request: &extprocv3.ProcessingRequest_RequestHeaders{
			RequestHeaders: &extprocv3.HttpHeaders{Headers: hdrs(":method", "POST", ":path", chatPath)}}})
		v.recv()
		v.requestBody(chatBody("hello", false), true)
		r := v.recv()
		v.closeAndDrain()
		return r
	}
	for range 5 {
		r := run(subsetMetadata("10.0.0.22:9999"))
		h := setHeaders(r.GetRequestBody().GetResponse())
		if h[HeaderDecodeHost] != d1Addr || h[HeaderRoute] != "decode" || h[HeaderDestination] != d1Addr {
			t.Fatalf("subset 10.0.0.22 (no prefill worker) chose %v", h)
		}
		if md := destinationMetadata(r); md != d1Addr {
			t.Fatalf("envoy.lb destination %q, want %s", md, d1Addr)
		}
	}
	// The same cold prompt goes remote when the hint lists the prefill worker: the destination
	// is the prefill worker, the decode worker the listed one.
	for range 3 {
		r := run(subsetMetadata(p0Addr, "10.0.0.21:8000"))
		h := setHeaders(r.GetRequestBody().GetResponse())
		if h[HeaderRoute] != "prefill" || h[HeaderDestination] != p0Addr || h[HeaderDecodeHost] != d0Addr {
			t.Fatalf("subset {prefill-0, decode-0} chose %v", h)
		}
		if md := destinationMetadata(r); md != p0Addr {
			t.Fatalf("envoy.lb destination %q, want %s", md, p0Addr)
		}
	}
	expectImmediate(t, run(subsetMetadata()), 503, "subset_no_match")
	expectImmediate(t, run(subsetMetadata("10.9.9.9:8000")), 503, "subset_no_match")
	st, _ := structpb.NewStruct(map[string]any{SubsetKey: "10.0.0.21:1, 10.0.0.99:1"})
	h := setHeaders(run(&corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{SubsetNamespace: st}}).GetRequestBody().GetResponse())
	if h[HeaderDecodeHost] != d0Addr {
		t.Fatalf("comma-string subset chose %v", h[HeaderDecodeHost])
	}
}

// TestFailureMode: internal failures (a model without a chat template, a recovered panic)
// answer 503 internal when closed and route to the least-loaded decode worker when open.
func TestFailureMode(t *testing.T) {
	for _, c := range []struct {
		mode   FailureMode
		panics bool
	}{{FailClosed, false}, {FailOpen, false}, {FailClosed, true}, {FailOpen, true}} {
		t.Run(fmt.Sprintf("%s/panic=%v", c.mode, c.panics), func(t *testing.T) {
			e := newEnv(t, envOptions{tokenizer: brokenTokenizer{panics: c.panics},
				settings: func(s *Settings) { s.FailureMode = c.mode }})
			v := e.open(buffered, streamed)
			v.requestHeaders(false, ":method", "POST", ":path", chatPath)
			v.recv()
			v.requestBody(chatBody("hi", false), true)
			r := v.recv()
			if c.mode == FailClosed {
				expectImmediate(t, r, 503, "internal")
			} else if h := setHeaders(r.GetRequestBody().GetResponse()); h[HeaderRoute] != "decode" ||
				!strings.Contains(h[HeaderDecision], "reason=failure_open") {
				t.Fatalf("fail-open headers %v", h)
			}
			v.closeAndDrain()
			if got := testutil.ToFloat64(e.metrics.InternalErrors); got != 1 {
				t.Fatalf("internal errors = %v", got)
			}
		})
	}
}

// TestUnknownModel404: a request whose model names no served model or adapter gets vLLM's own
// answer (404 NotFoundError, param model, numeric code) as an immediate response under
// unknown_model reject, in both body modes, is counted and books nothing; a served name routes.
func TestUnknownModel404(t *testing.T) {
	e := newEnv(t, envOptions{model: "qwen3", unknown: route.UnknownReject})
	body := []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`)
	want := "{\"error\":{\"message\":\"The model `gpt-4o` does not exist.\",\"type\":\"NotFoundError\",\"param\":\"model\",\"code\":404}}"
	for _, mode := range []filterv3.ProcessingMode_BodySendMode{buffered, fullDuplex} {
		v := e.open(mode, streamed)
		v.requestHeaders(false, ":method", "POST", ":path", chatPath)
		if mode == buffered {
			v.recv()
		}
		v.requestBody(body, true)
		r := v.recv()
		expectImmediate(t, r, 404, "unknown_model")
		if got := string(r.GetImmediateResponse().GetBody()); got != want {
			t.Fatalf("%v: body %s, want %s", mode, got, want)
		}
		v.closeAndDrain()
	}
	if got := testutil.ToFloat64(e.metrics.UnknownModel.WithLabelValues("reject")); got != 2 {
		t.Fatalf("unknown_model{reject} = %v, want 2", got)
	}
	if got := testutil.ToFloat64(e.metrics.Rejected.WithLabelValues("unknown_model")); got != 2 {
		t.Fatalf("rejected{unknown_model} = %v, want 2", got)
	}
	if e.totalRequests() != 0 {
		t.Fatal("a refused request was booked")
	}
	v := e.open(buffered, streamed)
	v.requestHeaders(false, ":method", "POST", ":path", chatPath)
	v.recv()
	v.requestBody(chatBody("hi", false), true) // model qwen3
	if h := setHeaders(v.recv().GetRequestBody().GetResponse()); h[HeaderRoute] == "" {
		t.Fatalf("served model not routed: %v", h)
	}
	v.closeAndDrain()
}

// TestUnknownModelPassthrough: under unknown_model passthrough the request is routed to a
// decode worker by load (reason passthrough, no cache credit), counted, and released with its
// response.
func TestUnknownModelPassthrough(t *testing.T) {
	e := newEnv(t, envOptions{model: "qwen3", unknown: route.UnknownPassthrough})
	v := e.open(buffered, streamed)
	v.requestHeaders(false, ":method", "POST", ":path", chatPath)
	v.recv()
	v.requestBody([]byte(`{"model":"new-adapter","messages":[{"role":"user","content":"hi"}]}`), true)
	h := setHeaders(v.recv().GetRequestBody().GetResponse())
	if h[HeaderRoute] != "decode" || !strings.Contains(h[HeaderDecision], "reason=passthrough") || h[HeaderDecodeHost] == "" {
		t.Fatalf("passthrough headers %v", h)
	}
	if got := testutil.ToFloat64(e.metrics.UnknownModel.WithLabelValues("passthrough")); got != 1 {
		t.Fatalf("unknown_model{passthrough} = %v, want 1", got)
	}
	if e.totalRequests() != 1 {
		t.Fatalf("open bookings %d, want 1", e.totalRequests())
	}
	v.responseHeaders(true, ":status", "404")
	v.recv()
	v.closeAndDrain()
	if e.totalRequests() != 0 {
		t.Fatal("passthrough booking not released")
	}
}

// destinationMetadata is the envoy.lb x-gateway-destination-endpoint a response sets.
func destinationMetadata(r *extprocv3.ProcessingResponse) string {
	return r.GetDynamicMetadata().GetFields()[MetadataNamespace].GetStructValue().GetFields()[HeaderDestination].GetStringValue()
}

// TestPromptTooLong400: a prompt over the model's max_model_len gets vLLM 0.32's own answer
// (400 BadRequestError, param input_tokens, its message word for word, numeric code), counted,
// nothing booked.
func TestPromptTooLong400(t *testing.T) {
	e := newEnv(t, envOptions{maxModelLen: 16})
	want := "{\"error\":{\"message\":\"This model's maximum context length is 16 tokens. However, your prompt contains at least 17 input tokens, " +
		"which exceeds this limit even without any output tokens. Please reduce the length of the input prompt. (parameter=input_tokens, value=17)\"," +
		"\"type\":\"BadRequestError\",\"param\":\"input_tokens\",\"code\":400}}"
	v := e.open(buffered, streamed)
	v.requestHeaders(false, ":method", "POST", ":path", chatPath)
	v.recv()
	v.requestBody(chatBody(strings.Repeat("a prompt longer than the context ", 4), false), true)
	r := v.recv()
	expectImmediate(t, r, 400, "prompt_too_long")
	if got := string(r.GetImmediateResponse().GetBody()); got != want {
		t.Fatalf("body %s, want %s", got, want)
	}
	v.closeAndDrain()
	if e.totalRequests() != 0 {
		t.Fatal("a refused request was booked")
	}
}
