package sidecar

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/condisagg/condisagg/internal/leakcheck"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestMain ends the tests with a goroutine-leak check.
func TestMain(m *testing.M) { leakcheck.Main(m, "condisagg/sidecar.") }

// seen is one request as a test worker received it.
type seen struct {
	method, path string
	header       http.Header
	body         []byte
}

// worker is a loopback HTTP server standing in for a vLLM worker. It records every request
// (on a buffered channel) and answers with its handler.
type worker struct {
	srv  *httptest.Server
	addr string // 127.0.0.1:port
	reqs chan seen
}

func newWorker(t *testing.T, handle func(w http.ResponseWriter, r *http.Request, body []byte)) *worker {
	t.Helper()
	wk := &worker{reqs: make(chan seen, 64)}
	wk.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		wk.reqs <- seen{method: r.Method, path: r.URL.RequestURI(), header: r.Header.Clone(), body: body}
		handle(w, r, body)
	}))
	wk.addr = wk.srv.Listener.Addr().String()
	t.Cleanup(wk.srv.Close)
	return wk
}

// next returns the worker's next recorded request, failing the test after 5 s.
func (wk *worker) next(t *testing.T) seen {
	t.Helper()
	select {
	case s := <-wk.reqs:
		return s
	case <-time.After(5 * time.Second):
		t.Fatalf("worker %s: no request arrived", wk.addr)
		return seen{}
	}
}

// count drains and counts the recorded requests (call after the client got its answer).
func (wk *worker) count() int {
	n := 0
	for {
		select {
		case <-wk.reqs:
			n++
		default:
			return n
		}
	}
}

// pKV is a NixlConnector prefill answer's kv_transfer_params with unusual spacing and key
// order, so "verbatim" is checked byte for byte.
const pKV = `{"do_remote_prefill": true,"do_remote_decode":false, "remote_block_ids":[7,8,9],"remote_engine_id":"e-1f2a","remote_request_id":"r-9","remote_host":"10.0.0.5","remote_port":5600,"tp_size":1}`

// prefillAnswerJSON is what vLLM's NixlConnector prefill worker answers (§6.3 step 3).
func prefillAnswerJSON(kv string, cached int) string {
	return `{"id":"cmpl-p","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"x","logprobs":null,"finish_reason":"length","stop_reason":null}],` +
		fmt.Sprintf(`"usage":{"prompt_tokens":40,"total_tokens":41,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":%d}},`, cached) +
		`"kv_transfer_params":` + kv + `}`
}

// prefillOK answers like a NixlConnector prefill worker.
func prefillOK(kv string, cached int) func(http.ResponseWriter, *http.Request, []byte) {
	return func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, prefillAnswerJSON(kv, cached))
	}
}

// statusAnswer answers code with a vLLM-style error body.
func statusAnswer(code int) func(http.ResponseWriter, *http.Request, []byte) {
	return func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		fmt.Fprintf(w, `{"object":"error","message":"upstream says %d","type":"Err","param":null,"code":%d}`, code, code)
	}
}

// sseEvents are the chunks a test decode worker streams.
var sseEvents = []string{
	"data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n",
	"data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n",
	"data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"},\"finish_reason\":\"stop\"}]}\n\n",
	"data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":40,\"completion_tokens\":2,\"total_tokens\":42,\"prompt_tokens_details\":{\"cached_tokens\":48}}}\n\n",
	"data: [DONE]\n\n",
}

// decodeSSE streams sseEvents, one flushed write each. With gate, it waits for a value on gate
// before every event after the second, the first token (or for the client to go away): the
// sidecar holds a remote stream's opening events until its first token.
func decodeSSE(gate <-chan struct{}) func(http.ResponseWriter, *http.Request, []byte) {
	return func(w http.ResponseWriter, r *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		w.Header().Set("X-Worker", "decode")
		w.WriteHeader(http.StatusOK)
		rc := http.NewResponseController(w)
		for i, ev := range sseEvents {
			if gate != nil && i > 1 {
				select {
				case <-gate:
				case <-r.Context().Done():
					return
				}
			}
			_, _ = io.WriteString(w, ev)
			_ = rc.Flush()
		}
	}
}

const decodeJSONAnswer = `{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":40,"completion_tokens":2,"total_tokens":42,"prompt_tokens_details":{"cached_tokens":48}}}`

func decodeJSON(w http.ResponseWriter, _ *http.Request, _ []byte) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, decodeJSONAnswer)
}

// harness is one Proxy behind a loopback server, with its own registry.
type harness struct {
	t   *testing.T
	p   *Proxy
	srv *httptest.Server
	m   *Metrics
}

func testConfig() Config {
	return Config{RetryBackoff: time.Millisecond, RetryBackoffMax: 2 * time.Millisecond}
}

func newHarness(t *testing.T, cfg Config, allow ...string) *harness {
	t.Helper()
	al, err := NewAllowlist(allow)
	if err != nil {
		t.Fatal(err)
	}
	m := NewMetrics(prometheus.NewRegistry())
	p, err := New(cfg, al, Options{Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	t.Cleanup(func() { srv.Close(); p.Close() })
	return &harness{t: t, p: p, srv: srv, m: m}
}

// do sends a request through the proxy and returns the response with its body read whole.
func (h *harness) do(method, path, body string, hdr map[string]string) (*http.Response, string) {
	h.t.Helper()
	resp := h.send(context.Background(), method, path, body, hdr)
	b, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		h.t.Fatalf("read answer: %v", err)
	}
	return resp, string(b)
}

func (h *harness) send(ctx context.Context, method, path, body string, hdr map[string]string) *http.Response {
	h.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, h.srv.URL+path, rd)
	if err != nil {
		h.t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := h.srv.Client().Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp
}

// routeHeaders are the contract headers condisagg sets for the remote path.
func routeHeaders(p, d *worker) map[string]string {
	h := map[string]string{HeaderDecodeHost: d.addr}
	if p != nil {
		h[HeaderPrefillHost] = p.addr
	}
	return h
}

func counter(c prometheus.Collector) float64 { return testutil.ToFloat64(c) }

// wantError checks an OpenAI-style error answer of the sidecar.
func wantError(t *testing.T, resp *http.Response, body string, status int, code string) {
	t.Helper()
	if resp.StatusCode != status {
		t.Fatalf("status = %d, want %d (body %s)", resp.StatusCode, status, body)
	}
	if got := resp.Header.Get(HeaderError); got != code {
		t.Errorf("%s = %q, want %q", HeaderError, got, code)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("content-type = %q", ct)
	}
	if !strings.HasPrefix(body, `{"error":{"message":`) || !strings.Contains(body, `"param":null,"code":"`+code+`"`) {
		t.Errorf("error body = %s", body)
	}
}

func mustEqualBytes(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		t.Fatalf("%s:\n got %s\nwant %s", what, got, want)
	}
}
