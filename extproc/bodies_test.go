package extproc

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestPassthroughBodiesCleanedBuffered: in BUFFERED mode a passthrough path is routed at the
// headers and its one body message is answered with the body cleaned of every engine-control
// member and its Content-Length; a clean body is not mutated; an unreadable one gets vLLM's 400
// (issue 23 item 1: /v1/responses, /v1/messages and /inference/v1/generate went upstream unread).
func TestPassthroughBodiesCleanedBuffered(t *testing.T) {
	e := newEnv(t, envOptions{})
	for _, path := range []string{"/v1/responses", "/v1/messages", "/inference/v1/generate", "/anything"} {
		v := e.open(buffered, streamed)
		v.requestHeaders(false, ":method", "POST", ":path", path)
		if h := setHeaders(v.recv().GetRequestHeaders().GetResponse()); h[HeaderRoute] != "decode" {
			t.Fatalf("%s: headers %v", path, h)
		}
		v.requestBody([]byte(`{"input":"x","kv_transfer_params":{"remote_host":"10.9.9.9"},"ec_transfer_params":{},"vllm_xargs":{"a":1}}`), true)
		c := v.recv().GetRequestBody().GetResponse()
		if got := string(c.GetBodyMutation().GetBody()); got != `{"input":"x"}` {
			t.Fatalf("%s: upstream body %q", path, got)
		}
		v.closeAndDrain()

		v = e.open(buffered, streamed)
		v.requestHeaders(false, ":method", "POST", ":path", path)
		v.recv()
		v.requestBody([]byte(`{"input":"x"}`), true)
		if c := v.recv().GetRequestBody().GetResponse(); c.GetBodyMutation() != nil {
			t.Fatalf("%s: a clean body was mutated: %v", path, c)
		}
		v.closeAndDrain()

		v = e.open(buffered, streamed)
		v.requestHeaders(false, ":method", "POST", ":path", path, "content-type", "multipart/form-data; boundary=x")
		v.recv()
		v.requestBody([]byte("--x\r\nContent-Disposition: form-data; name=\"vllm_xargs\"\r\n\r\n{}\r\n--x--"), true)
		expectImmediate(t, v.recv(), 400, "unreadable_body")
		v.closeAndDrain()
	}
	for field, want := range map[string]float64{"kv_transfer_params": 4, "ec_transfer_params": 4, "vllm_xargs": 4} {
		if got := testutil.ToFloat64(e.metrics.StrippedFields.WithLabelValues(field)); got != want {
			t.Errorf("stripped %s = %v, want %v", field, got, want)
		}
	}
	if e.totalRequests() != 0 {
		t.Fatalf("bookings left: %d", e.totalRequests())
	}
}

// TestRequestChatTemplateRoutedByLoad: a chat request that brings its own template is routed by
// load with reason request_chat_template (it went failure_open with a WARN per request before).
func TestRequestChatTemplateRoutedByLoad(t *testing.T) {
	e := newEnv(t, envOptions{})
	for _, body := range []string{
		`{"model":"qwen3","messages":[{"role":"user","content":"hi"}],"chat_template":"{{ messages }}"}`,
		`{"model":"qwen3","messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":{"chat_template":"x"}}`,
	} {
		v := e.open(buffered, streamed)
		v.requestHeaders(false, ":method", "POST", ":path", chatPath)
		v.recv()
		v.requestBody([]byte(body), true)
		h := setHeaders(v.recv().GetRequestBody().GetResponse())
		if h[HeaderRoute] != "decode" || !strings.Contains(h[HeaderDecision], "reason=request_chat_template") {
			t.Fatalf("%s: %v", body, h)
		}
		v.closeAndDrain()
	}
	if got := testutil.ToFloat64(e.metrics.InternalErrors); got != 0 {
		t.Fatalf("internal errors = %v; a request template is not a pipeline failure", got)
	}
}
