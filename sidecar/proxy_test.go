package sidecar

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

const chatBody = `{"model":"m","messages":[{"role":"user","content":"hi \"there\""}],"stream":true,"stream_options":{"include_usage":true},"max_tokens":50,"min_tokens":5,"temperature":0.7}`

// TestRemote_PrefillLegBody checks the exact bytes P receives (§6.3 step 2).
func TestRemote_PrefillLegBody(t *testing.T) {
	const kv = `"kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}`
	cases := []struct {
		name, spec, path, body, want string
	}{
		{"chat_stream_usage_min_tokens", "6.3 step 2", "/v1/chat/completions", chatBody,
			`{"model":"m","messages":[{"role":"user","content":"hi \"there\""}],"stream":false,"max_tokens":1,"temperature":0.7,` + kv + `}`},
		{"max_completion_tokens_set_when_present", "6.3 step 2", "/v1/chat/completions",
			`{"model":"m","messages":[],"max_completion_tokens":300,"min_completion_tokens":3}`,
			`{"model":"m","messages":[],"max_completion_tokens":1,"stream":false,"max_tokens":1,` + kv + `}`},
		{"completions_no_limits_appended", "6.3 step 2", "/v1/completions",
			`{"prompt":"abc", "model" : "m"}`,
			`{"prompt":"abc","model":"m","stream":false,"max_tokens":1,` + kv + `}`},
		{"client_kv_transfer_params_replaced_in_place", "6.3 step 2", "/v1/completions",
			`{"kv_transfer_params":{"remote_host":"evil"},"prompt":"abc","stream":true,"stream":true}`,
			`{` + kv + `,"prompt":"abc","stream":false,"max_tokens":1}`},
		{"responses_uses_max_output_tokens", "6.3 step 2", "/v1/responses",
			`{"model":"m","input":"hi","max_output_tokens":99,"stream":true}`,
			`{"model":"m","input":"hi","max_output_tokens":1,"stream":false,` + kv + `}`},
		{"escaped_key_matches", "6.3 step 2", "/v1/completions",
			`{"prompt":"a","str\u0065am":true}`,
			`{"prompt":"a","str\u0065am":false,"max_tokens":1,` + kv + `}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newWorker(t, prefillOK(pKV, 0))
			d := newWorker(t, decodeJSON)
			h := newHarness(t, testConfig(), p.addr, d.addr)
			resp, _ := h.do("POST", tc.path, tc.body, routeHeaders(p, d))
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d", resp.StatusCode)
			}
			got := p.next(t)
			if got.path != tc.path || got.method != "POST" {
				t.Errorf("prefill leg %s %s", got.method, got.path)
			}
			mustEqualBytes(t, "prefill leg body ("+tc.spec+")", got.body, []byte(tc.want))
		})
	}
}

var uuid4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// TestRemote_DecodeLeg checks §6.3 step 4: the original JSON plus P's kv_transfer_params
// verbatim, the same X-Request-Id on both legs, and the routing headers not forwarded.
func TestRemote_DecodeLeg(t *testing.T) {
	for _, tc := range []struct {
		name, clientID string
	}{{"generated_uuid4", ""}, {"client_id_propagated", "req-abc-123"}} {
		t.Run(tc.name, func(t *testing.T) {
			p := newWorker(t, prefillOK(pKV, 0))
			d := newWorker(t, decodeSSE(nil))
			h := newHarness(t, testConfig(), p.addr, d.addr)
			hdr := routeHeaders(p, d)
			hdr[HeaderPrefillerHostPort] = p.addr
			hdr[HeaderDestination] = "127.0.0.1:1"
			hdr["X-Condisagg-Route"] = "prefill"
			hdr["Authorization"] = "Bearer k"
			if tc.clientID != "" {
				hdr[HeaderRequestID] = tc.clientID
			}
			resp, _ := h.do("POST", "/v1/chat/completions", chatBody, hdr)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d", resp.StatusCode)
			}
			pl, dl := p.next(t), d.next(t)
			want := chatBody[:len(chatBody)-1] + `,"kv_transfer_params":` + pKV + `}`
			mustEqualBytes(t, "decode leg body", dl.body, []byte(want))
			pid, did := pl.header.Get(HeaderRequestID), dl.header.Get(HeaderRequestID)
			if pid != did || pid == "" {
				t.Fatalf("request ids differ: prefill %q decode %q", pid, did)
			}
			if tc.clientID != "" && pid != tc.clientID {
				t.Errorf("request id %q, want the client's %q", pid, tc.clientID)
			}
			if tc.clientID == "" && !uuid4.MatchString(pid) {
				t.Errorf("generated request id %q is not a UUID4", pid)
			}
			for _, leg := range []seen{pl, dl} {
				for k := range leg.header {
					if isRoutingHeader(k) {
						t.Errorf("%s leg got routing header %s", leg.path, k)
					}
				}
				if leg.header.Get("Authorization") != "Bearer k" {
					t.Errorf("Authorization not forwarded")
				}
			}
			if got := counter(h.m.Requests.WithLabelValues(modeRemote, "200")); got != 1 {
				t.Errorf("requests_total{remote,200} = %v", got)
			}
		})
	}
}

// TestRemote_StreamsChunkByChunk checks that D's status, headers and events reach the client
// unchanged and that the first event arrives before D has finished.
func TestRemote_StreamsChunkByChunk(t *testing.T) {
	gate := make(chan struct{})
	p := newWorker(t, prefillOK(pKV, 0))
	d := newWorker(t, decodeSSE(gate))
	h := newHarness(t, testConfig(), p.addr, d.addr)
	resp := h.send(context.Background(), "POST", "/v1/chat/completions", chatBody, routeHeaders(p, d))
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-Worker") != "decode" ||
		resp.Header.Get("Content-Type") != "text/event-stream; charset=utf-8" {
		t.Fatalf("status %d headers %v", resp.StatusCode, resp.Header)
	}
	br := bufio.NewReader(resp.Body)
	var got strings.Builder
	for i, ev := range sseEvents {
		if i > 1 {
			gate <- struct{}{} // D sends event i only now: the client already holds event i-1
		}
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		blank, _ := br.ReadString('\n')
		if line+blank != ev {
			t.Fatalf("event %d = %q, want %q", i, line+blank, ev)
		}
		got.WriteString(line + blank)
	}
	if rest, _ := io.ReadAll(br); len(rest) != 0 {
		t.Fatalf("extra bytes after the stream: %q", rest)
	}
}

// TestPassthrough covers requests without a prefill host and the default decode host.
func TestPassthrough(t *testing.T) {
	p := newWorker(t, prefillOK(pKV, 0))
	d := newWorker(t, decodeJSON)
	t.Run("no_prefill_host_body_unchanged", func(t *testing.T) {
		h := newHarness(t, testConfig(), p.addr, d.addr)
		resp, body := h.do("POST", "/v1/chat/completions?x=1", chatBody, routeHeaders(nil, d))
		if resp.StatusCode != 200 || body != decodeJSONAnswer {
			t.Fatalf("status %d body %s", resp.StatusCode, body)
		}
		got := d.next(t)
		mustEqualBytes(t, "passthrough body", got.body, []byte(chatBody))
		if got.path != "/v1/chat/completions?x=1" {
			t.Errorf("path %q", got.path)
		}
		if n := p.count(); n != 0 {
			t.Errorf("prefill worker got %d requests", n)
		}
		if got := counter(h.m.Requests.WithLabelValues(modePassthrough, "200")); got != 1 {
			t.Errorf("requests_total{passthrough,200} = %v", got)
		}
	})
	t.Run("get_models_with_prefill_host_goes_to_decode", func(t *testing.T) {
		h := newHarness(t, testConfig(), p.addr, d.addr)
		resp, _ := h.do("GET", "/v1/models", "", routeHeaders(p, d))
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		if got := d.next(t); got.method != "GET" || got.path != "/v1/models" || len(got.body) != 0 {
			t.Errorf("decode got %s %s %q", got.method, got.path, got.body)
		}
		if n := p.count(); n != 0 {
			t.Errorf("prefill worker got %d requests", n)
		}
	})
	t.Run("client_kv_transfer_params_removed", func(t *testing.T) {
		h := newHarness(t, testConfig(), p.addr, d.addr)
		body := `{"model":"m","prompt":"a","kv_transfer_params":{"do_remote_prefill":true,"remote_host":"evil"}}`
		resp, _ := h.do("POST", "/v1/completions", body, routeHeaders(nil, d))
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		mustEqualBytes(t, "decode body", d.next(t).body, []byte(`{"model":"m","prompt":"a"}`))
		if got := counter(h.m.KVParamsRemoved); got != 1 {
			t.Errorf("kv params removed = %v", got)
		}
	})
	t.Run("no_decode_host_no_default_403", func(t *testing.T) {
		h := newHarness(t, testConfig(), p.addr, d.addr)
		resp, body := h.do("POST", "/v1/completions", `{"prompt":"a"}`, nil)
		wantError(t, resp, body, http.StatusForbidden, "no_decode_host")
		if n := d.count(); n != 0 {
			t.Errorf("decode worker got %d requests", n)
		}
	})
	t.Run("no_decode_host_uses_default", func(t *testing.T) {
		cfg := testConfig()
		cfg.DefaultDecodeHost = d.addr
		h := newHarness(t, cfg, p.addr)
		resp, _ := h.do("POST", "/v1/completions", `{"prompt":"a"}`, map[string]string{HeaderPrefillHost: p.addr})
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		p.next(t)
		mustEqualBytes(t, "decode body", d.next(t).body, []byte(`{"prompt":"a","kv_transfer_params":`+pKV+`}`))
	})
}

// TestRemote_InvalidBody: the remote path needs a JSON object.
func TestRemote_InvalidBody(t *testing.T) {
	p := newWorker(t, prefillOK(pKV, 0))
	d := newWorker(t, decodeJSON)
	h := newHarness(t, testConfig(), p.addr, d.addr)
	for _, body := range []string{`not json`, `[1,2]`, `{"a":1`, ``} {
		resp, got := h.do("POST", "/v1/completions", body, routeHeaders(p, d))
		wantError(t, resp, got, http.StatusBadRequest, "invalid_body")
	}
	if n := p.count() + d.count(); n != 0 {
		t.Errorf("workers got %d requests", n)
	}
}

// TestBodyLimit: bodies over MaxBodyBytes get 413, with and without Content-Length.
func TestBodyLimit(t *testing.T) {
	p := newWorker(t, prefillOK(pKV, 0))
	d := newWorker(t, decodeJSON)
	cfg := testConfig()
	cfg.MaxBodyBytes = 64
	h := newHarness(t, cfg, p.addr, d.addr)
	big := `{"prompt":"` + strings.Repeat("a", 100) + `"}`
	resp, body := h.do("POST", "/v1/completions", big, routeHeaders(p, d))
	wantError(t, resp, body, http.StatusRequestEntityTooLarge, "body_too_large")

	req, _ := http.NewRequest("POST", h.srv.URL+"/v1/completions", io.MultiReader(strings.NewReader(big))) // no Content-Length: chunked
	for k, v := range routeHeaders(p, d) {
		req.Header.Set(k, v)
	}
	resp2, err := h.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp2.Body)
	resp2.Body.Close()
	if req.ContentLength != 0 {
		t.Fatalf("request has Content-Length %d, want none (chunked)", req.ContentLength)
	}
	wantError(t, resp2, string(b), http.StatusRequestEntityTooLarge, "body_too_large")

	ok := `{"prompt":"` + strings.Repeat("a", 40) + `"}`
	if resp, _ := h.do("POST", "/v1/completions", ok, routeHeaders(p, d)); resp.StatusCode != 200 {
		t.Fatalf("body under the limit: status %d", resp.StatusCode)
	}
	if got := counter(h.m.Rejected.WithLabelValues("body_too_large")); got != 2 {
		t.Errorf("rejected{body_too_large} = %v", got)
	}
}

// TestHopByHopHeaders: connection-specific headers are dropped both ways.
func TestHopByHopHeaders(t *testing.T) {
	p := newWorker(t, prefillOK(pKV, 0))
	d := newWorker(t, func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.Header().Set("Connection", "X-Hop")
		w.Header().Set("X-Hop", "1")
		w.Header().Set("Keep-Alive", "timeout=5")
		w.Header().Set("X-End", "2")
		decodeJSON(w, nil, nil)
	})
	h := newHarness(t, testConfig(), p.addr, d.addr)
	hdr := routeHeaders(p, d)
	hdr["Connection"] = "X-Secret"
	hdr["X-Secret"] = "s"
	hdr["Proxy-Authorization"] = "x"
	hdr["X-Keep"] = "k"
	hdr["X_Condisagg_Prefill_Host"] = "127.0.0.1:1"
	resp, _ := h.do("POST", "/v1/completions", `{"prompt":"a"}`, hdr)
	for _, leg := range []seen{p.next(t), d.next(t)} {
		for _, k := range []string{"X-Secret", "Proxy-Authorization", "X_condisagg_prefill_host", "X_Condisagg_Prefill_Host"} {
			if _, ok := leg.header[k]; ok {
				t.Errorf("%s forwarded", k)
			}
		}
		if leg.header.Get("X-Keep") != "k" {
			t.Errorf("X-Keep not forwarded")
		}
	}
	if resp.Header.Get("X-Hop") != "" || resp.Header.Get("Keep-Alive") != "" || resp.Header.Get("X-End") != "2" {
		t.Errorf("response headers %v", resp.Header)
	}
}

// TestClientCancel: a client that goes away mid-stream cancels the decode worker's request.
func TestClientCancel(t *testing.T) {
	dGone := make(chan struct{})
	p := newWorker(t, prefillOK(pKV, 0))
	d := newWorker(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, sseEvents[0]+sseEvents[1]) // through the first token
		_ = http.NewResponseController(w).Flush()
		<-r.Context().Done()
		close(dGone)
	})
	h := newHarness(t, testConfig(), p.addr, d.addr)
	ctx, cancel := context.WithCancel(context.Background())
	resp := h.send(ctx, "POST", "/v1/chat/completions", chatBody, routeHeaders(p, d))
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || !strings.HasPrefix(sseEvents[0], line) {
		t.Fatalf("first event %q: %v", line, err)
	}
	cancel()
	resp.Body.Close()
	select {
	case <-dGone:
	case <-time.After(5 * time.Second):
		t.Fatal("the decode worker's request was not cancelled")
	}
}

// TestHealthz is answered by the sidecar itself.
func TestHealthz(t *testing.T) {
	h := newHarness(t, testConfig(), "127.0.0.1:9")
	if resp, _ := h.do("GET", "/healthz", "", nil); resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
}

// TestRemote_LLMDHeaderAndIPv6: x-prefiller-host-port alone selects the remote path, and an
// allowlisted IPv6 worker is dialled correctly.
func TestRemote_LLMDHeaderAndIPv6(t *testing.T) {
	ln, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	p := &worker{reqs: make(chan seen, 8)}
	p.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		p.reqs <- seen{method: r.Method, path: r.URL.RequestURI(), header: r.Header.Clone(), body: body}
		prefillOK(pKV, 0)(w, r, body)
	}))
	p.srv.Listener.Close()
	p.srv.Listener = ln
	p.srv.Start()
	t.Cleanup(p.srv.Close)
	p.addr = ln.Addr().String()
	d := newWorker(t, decodeJSON)
	h := newHarness(t, testConfig(), p.addr, d.addr)
	_, port, _ := net.SplitHostPort(p.addr)
	hdr := map[string]string{HeaderPrefillerHostPort: "[0:0::1]:" + port, HeaderDecodeHost: d.addr}
	resp, _ := h.do("POST", "/v1/completions", `{"prompt":"a"}`, hdr)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if got := p.next(t); !strings.Contains(string(got.body), `"do_remote_decode":true`) {
		t.Fatalf("prefill leg body %s", got.body)
	}
	mustEqualBytes(t, "decode body", d.next(t).body, []byte(`{"prompt":"a","kv_transfer_params":`+pKV+`}`))
}

// TestDialOverrides: a routing-header host with an override is dialled at its target (a
// sidecar listening on its prefill worker's advertised endpoint), and an override whose key
// is not allowed is a configuration error.
func TestDialOverrides(t *testing.T) {
	p := newWorker(t, prefillOK(pKV, 0))
	d := newWorker(t, decodeJSON)
	advertised := closedAddr(t) // what the router knows P by: nothing of P's listens there
	cfg := testConfig()
	cfg.DialOverrides = map[string]string{advertised: p.addr}
	h := newHarness(t, cfg, advertised, d.addr)
	resp, _ := h.do("POST", "/v1/completions", `{"prompt":"a"}`, map[string]string{HeaderPrefillHost: advertised, HeaderDecodeHost: d.addr})
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if got := p.next(t); !strings.Contains(string(got.body), `"do_remote_decode":true`) {
		t.Fatalf("prefill leg body %s", got.body)
	}
	mustEqualBytes(t, "decode body", d.next(t).body, []byte(`{"prompt":"a","kv_transfer_params":`+pKV+`}`))

	al, _ := NewAllowlist([]string{d.addr})
	if _, err := New(cfg, al, Options{Metrics: NewMetrics(prometheus.NewRegistry())}); err == nil || !strings.Contains(err.Error(), "not in the allowlist") {
		t.Fatalf("override of an unlisted host: err = %v", err)
	}
	cfg.DialOverrides = map[string]string{advertised: "nope"}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "dial_overrides["+advertised+`]: "nope"`) {
		t.Fatalf("bad target: err = %v", err)
	}
}

// TestPrefillMsHeader: a response that followed a prefill leg says how long the leg took
// (X-Condisagg-Prefill-Ms), on the remote path and on the local fallback after a failed
// prefill, so the router frees the prefill load when the response starts; a passthrough has
// none, and a worker cannot forge one (x-condisagg-* response headers are not relayed).
func TestPrefillMsHeader(t *testing.T) {
	slowPrefill := func(w http.ResponseWriter, r *http.Request, b []byte) {
		time.Sleep(30 * time.Millisecond)
		prefillOK(pKV, 0)(w, r, b)
	}
	forging := func(w http.ResponseWriter, r *http.Request, b []byte) {
		w.Header().Set(HeaderPrefillMs, "999999")
		w.Header().Set("X-Condisagg-Route", "forged")
		decodeJSON(w, r, b)
	}
	for _, tc := range []struct {
		name    string
		prefill func(http.ResponseWriter, *http.Request, []byte)
		remote  bool // a prefill host is sent
		minMs   int
	}{
		{"remote", slowPrefill, true, 30},
		{"fallback_after_prefill_error", statusAnswer(503), true, 0},
		{"passthrough", prefillOK(pKV, 0), false, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, d := newWorker(t, tc.prefill), newWorker(t, forging)
			h := newHarness(t, testConfig(), p.addr, d.addr)
			hdr := routeHeaders(nil, d)
			if tc.remote {
				hdr = routeHeaders(p, d)
			}
			resp, _ := h.do("POST", "/v1/completions", `{"model":"m","prompt":"a"}`, hdr)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d", resp.StatusCode)
			}
			if v := resp.Header.Get("X-Condisagg-Route"); v != "" {
				t.Errorf("worker's x-condisagg-route %q relayed", v)
			}
			v := resp.Header.Get(HeaderPrefillMs)
			if tc.minMs < 0 {
				if v != "" {
					t.Errorf("passthrough answer carries %s: %q", HeaderPrefillMs, v)
				}
				return
			}
			ms, err := strconv.Atoi(v)
			if err != nil || ms < tc.minMs || ms > 5000 {
				t.Errorf("%s = %q, want the prefill leg's milliseconds (>= %d)", HeaderPrefillMs, v, tc.minMs)
			}
		})
	}
}
