package sidecar

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestAllowlist_403 sends routing headers that name no allowed host:port; nothing may reach a
// worker and the answer is 403 host_not_allowed.
func TestAllowlist_403(t *testing.T) {
	p := newWorker(t, prefillOK(pKV, 0))
	d := newWorker(t, decodeJSON)
	h := newHarness(t, testConfig(), p.addr, d.addr)
	_, port, _ := net.SplitHostPort(d.addr)
	other := strconv.Itoa(mustAtoi(t, port) + 1)
	bad := []struct{ name, value string }{
		{"different_port", "127.0.0.1:" + other},
		{"ipv6_loopback", "[::1]:" + port},
		{"ipv4_mapped_ipv6", "[::ffff:127.0.0.1]:" + port},
		{"userinfo", "user@127.0.0.1:" + port},
		{"userinfo_after", "127.0.0.1:" + port + "@evil.example:80"},
		{"extra_path", "127.0.0.1:" + port + "/v1/evil"},
		{"query", "127.0.0.1:" + port + "?x=1"},
		{"scheme", "http://127.0.0.1:" + port},
		{"leading_zero_port", "127.0.0.1:0" + port},
		{"no_port", "127.0.0.1"},
		{"list", d.addr + "," + d.addr},
		{"localhost_name", "localhost:" + port},
		{"short_ipv4", "127.1:" + port},
		{"empty", ""},
		{"unlisted_ip", "10.0.0.1:" + port},
	}
	for _, tc := range bad {
		for _, header := range []string{HeaderPrefillHost, HeaderDecodeHost, HeaderPrefillerHostPort} {
			t.Run(tc.name+"/"+header, func(t *testing.T) {
				hdr := routeHeaders(p, d)
				if header == HeaderPrefillerHostPort {
					delete(hdr, HeaderPrefillHost)
				}
				hdr[header] = tc.value
				resp, body := h.do("POST", "/v1/completions", `{"prompt":"a"}`, hdr)
				wantError(t, resp, body, http.StatusForbidden, "host_not_allowed")
			})
		}
	}
	if n := p.count() + d.count(); n != 0 {
		t.Fatalf("workers got %d requests", n)
	}
	if got := counter(h.m.Rejected.WithLabelValues("host_not_allowed")); got != float64(3*len(bad)) {
		t.Errorf("rejected{host_not_allowed} = %v, want %d", got, 3*len(bad))
	}
	t.Run("duplicate_header_values", func(t *testing.T) {
		req, _ := http.NewRequest("POST", h.srv.URL+"/v1/completions", strings.NewReader(`{"prompt":"a"}`))
		req.Header.Add(HeaderDecodeHost, d.addr)
		req.Header.Add(HeaderDecodeHost, d.addr)
		resp, err := h.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("status %d", resp.StatusCode)
		}
	})
}

func mustAtoi(t *testing.T, s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// flaky answers codes in order, then falls back to last for every later request.
func flaky(codes []int, last func(http.ResponseWriter, *http.Request, []byte)) func(http.ResponseWriter, *http.Request, []byte) {
	var n atomic.Int64
	return func(w http.ResponseWriter, r *http.Request, b []byte) {
		i := int(n.Add(1)) - 1
		if i < len(codes) {
			statusAnswer(codes[i])(w, r, b)
			return
		}
		last(w, r, b)
	}
}

// TestRetries: only connect failures and 502/503/504 are retried, bounded by MaxAttempts.
func TestRetries(t *testing.T) {
	cases := []struct {
		name, spec     string
		pCodes, dCodes []int
		wantStatus     int
		wantP, wantD   int
		wantRetries    map[leg]float64
	}{
		{"prefill_503_503_then_ok", "6.3 step 5 retries", []int{503, 503}, nil, 200, 3, 1, map[leg]float64{legPrefill: 2}},
		{"prefill_502_504_then_ok", "6.3 step 5 retries", []int{502, 504}, nil, 200, 3, 1, map[leg]float64{legPrefill: 2}},
		{"prefill_500_not_retried", "6.3 step 5", []int{500}, nil, 500, 1, 0, nil},
		{"prefill_400_not_retried", "6.3 step 5", []int{400}, nil, 400, 1, 0, nil},
		{"prefill_503_exhausted_passes_last", "6.3 step 5", []int{503, 503, 503}, nil, 503, 3, 0, map[leg]float64{legPrefill: 2}},
		{"decode_503_then_ok", "retries", nil, []int{503}, 200, 1, 2, map[leg]float64{legDecode: 1}},
		// A 500 before any byte went out is vLLM's answer to a failed KV load under
		// kv_load_failure_policy "fail": tried once more at D as a local prefill.
		{"decode_500_is_a_failed_kv_load", "kv_load_failure_policy fail", nil, []int{500}, 200, 1, 2, nil},
		{"decode_500_twice_passes_the_second", "kv_load_failure_policy fail", nil, []int{500, 500}, 500, 1, 2, nil},
		{"decode_400_not_retried", "retries", nil, []int{400}, 400, 1, 1, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newWorker(t, flaky(tc.pCodes, prefillOK(pKV, 0)))
			d := newWorker(t, flaky(tc.dCodes, decodeJSON))
			cfg := testConfig()
			cfg.Fallback = FallbackOff
			h := newHarness(t, cfg, p.addr, d.addr)
			resp, body := h.do("POST", "/v1/completions", `{"prompt":"a"}`, routeHeaders(p, d))
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("status %d, want %d (%s)", resp.StatusCode, tc.wantStatus, body)
			}
			if resp.StatusCode >= 400 && !strings.Contains(body, "upstream says "+strconv.Itoa(tc.wantStatus)) {
				t.Errorf("the worker's error body was not passed unchanged: %s", body)
			}
			if np, nd := p.count(), d.count(); np != tc.wantP || nd != tc.wantD {
				t.Errorf("attempts P=%d D=%d, want P=%d D=%d", np, nd, tc.wantP, tc.wantD)
			}
			for _, lg := range []leg{legPrefill, legDecode} {
				if got := counter(h.m.Retries.WithLabelValues(string(lg))); got != tc.wantRetries[lg] {
					t.Errorf("retries{%s} = %v, want %v", lg, got, tc.wantRetries[lg])
				}
			}
		})
	}
}

// closedAddr is a loopback host:port with nothing listening.
func closedAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestFallback: a failed prefill is served by local prefill at D (default), or returned.
func TestFallback(t *testing.T) {
	noKV := func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"x","choices":[{"finish_reason":"stop"}],"kv_transfer_params":null}`))
	}
	cases := []struct {
		name, spec string
		prefill    func(http.ResponseWriter, *http.Request, []byte) // nil: nothing listening
		reason     string
		offStatus  int
		offCode    string // sidecar error code with fallback off; "" = P's answer unchanged
	}{
		{"connect_refused", "6.3 step 5", nil, reasonConnect, 502, "prefill_connect"},
		{"status_500", "6.3 step 5", statusAnswer(500), reasonStatus, 500, ""},
		{"status_429", "6.3 step 5", statusAnswer(429), reasonStatus, 429, ""},
		{"no_kv_transfer_params", "6.3 step 3", noKV, reasonNoKV, 502, "prefill_no_kv_transfer_params"},
		{"not_json", "6.3 step 3", func(w http.ResponseWriter, _ *http.Request, _ []byte) { _, _ = w.Write([]byte("<html>")) }, reasonNoKV, 502, "prefill_no_kv_transfer_params"},
	}
	for _, tc := range cases {
		for _, mode := range []Fallback{FallbackLocal, FallbackOff} {
			name := tc.name + map[Fallback]string{FallbackLocal: "/fallback_on", FallbackOff: "/fallback_off"}[mode]
			t.Run(name, func(t *testing.T) {
				pAddr := closedAddr(t)
				var p *worker
				if tc.prefill != nil {
					p = newWorker(t, tc.prefill)
					pAddr = p.addr
				}
				d := newWorker(t, decodeJSON)
				cfg := testConfig()
				cfg.Fallback = mode
				cfg.MaxAttempts = 1
				h := newHarness(t, cfg, pAddr, d.addr)
				hdr := map[string]string{HeaderPrefillHost: pAddr, HeaderDecodeHost: d.addr}
				const body = `{"prompt":"a","kv_transfer_params":{"x":1},"max_tokens":9}`
				resp, got := h.do("POST", "/v1/completions", body, hdr)
				if mode == FallbackLocal {
					if resp.StatusCode != 200 || got != decodeJSONAnswer {
						t.Fatalf("status %d body %s", resp.StatusCode, got)
					}
					mustEqualBytes(t, "local prefill body", d.next(t).body, []byte(`{"prompt":"a","max_tokens":9}`))
					if n := counter(h.m.Fallbacks.WithLabelValues(tc.reason)); n != 1 {
						t.Errorf("prefill_fallbacks_total{%s} = %v", tc.reason, n)
					}
					return
				}
				if d.count() != 0 {
					t.Errorf("decode worker was called with fallback off")
				}
				if tc.offCode != "" {
					wantError(t, resp, got, tc.offStatus, tc.offCode)
				} else if resp.StatusCode != tc.offStatus || !strings.Contains(got, "upstream says") {
					t.Fatalf("status %d body %s, want P's %d unchanged", resp.StatusCode, got, tc.offStatus)
				}
				if n := counter(h.m.Requests.WithLabelValues(modePrefillError, strconv.Itoa(tc.offStatus))); n != 1 {
					t.Errorf("requests_total{prefill_error,%d} = %v", tc.offStatus, n)
				}
			})
		}
	}
	t.Run("prefill_400_not_a_fallback", func(t *testing.T) {
		p := newWorker(t, statusAnswer(400))
		d := newWorker(t, decodeJSON)
		h := newHarness(t, testConfig(), p.addr, d.addr)
		resp, body := h.do("POST", "/v1/completions", `{"prompt":"a"}`, routeHeaders(p, d))
		if resp.StatusCode != 400 || !strings.Contains(body, "upstream says 400") || d.count() != 0 {
			t.Fatalf("status %d body %s", resp.StatusCode, body)
		}
	})
}

// TestTimeouts: the prefill leg's total timeout and the decode first-byte timeout.
func TestTimeouts(t *testing.T) {
	hang := func(w http.ResponseWriter, r *http.Request, _ []byte) { <-r.Context().Done() }
	t.Run("prefill_timeout_fallback_off_504", func(t *testing.T) {
		p := newWorker(t, hang)
		d := newWorker(t, decodeJSON)
		cfg := testConfig()
		cfg.Fallback = FallbackOff
		cfg.PrefillTimeout = 100 * time.Millisecond
		h := newHarness(t, cfg, p.addr, d.addr)
		resp, body := h.do("POST", "/v1/completions", `{"prompt":"a"}`, routeHeaders(p, d))
		wantError(t, resp, body, http.StatusGatewayTimeout, "prefill_timeout")
	})
	t.Run("prefill_timeout_fallback_on", func(t *testing.T) {
		p := newWorker(t, hang)
		d := newWorker(t, decodeJSON)
		cfg := testConfig()
		cfg.PrefillTimeout = 100 * time.Millisecond
		h := newHarness(t, cfg, p.addr, d.addr)
		resp, _ := h.do("POST", "/v1/completions", `{"prompt":"a"}`, routeHeaders(p, d))
		if resp.StatusCode != 200 || counter(h.m.Fallbacks.WithLabelValues(reasonTimeout)) != 1 {
			t.Fatalf("status %d, fallbacks{timeout} = %v", resp.StatusCode, counter(h.m.Fallbacks.WithLabelValues(reasonTimeout)))
		}
	})
	t.Run("decode_first_byte_timeout_streaming", func(t *testing.T) {
		p := newWorker(t, prefillOK(pKV, 0))
		d := newWorker(t, hang)
		cfg := testConfig()
		cfg.DecodeFirstByteTimeout = 100 * time.Millisecond
		cfg.MaxAttempts = 1
		h := newHarness(t, cfg, p.addr, d.addr)
		resp, body := h.do("POST", "/v1/chat/completions", chatBody, routeHeaders(p, d))
		wantError(t, resp, body, http.StatusGatewayTimeout, "decode_timeout")
	})
	t.Run("first_byte_timeout_only_for_streaming", func(t *testing.T) {
		// A 1 ns first-byte timeout fails every streaming request; a non-streamed one, whose
		// headers vLLM sends only with the whole answer, must not be bounded by it.
		p := newWorker(t, prefillOK(pKV, 0))
		d := newWorker(t, decodeJSON)
		cfg := testConfig()
		cfg.DecodeFirstByteTimeout = time.Nanosecond
		cfg.MaxAttempts = 1
		h := newHarness(t, cfg, p.addr, d.addr)
		if resp, body := h.do("POST", "/v1/completions", `{"prompt":"a","stream":false}`, routeHeaders(p, d)); resp.StatusCode != 200 {
			t.Fatalf("non-streaming: status %d %s", resp.StatusCode, body)
		}
		resp, body := h.do("POST", "/v1/completions", `{"prompt":"a","stream":true}`, routeHeaders(p, d))
		wantError(t, resp, body, http.StatusGatewayTimeout, "decode_timeout")
	})
}

// TestRetries_ConnectFailure: a refused connection is retried (the request never reached the
// worker), MaxAttempts times in all, then the fallback serves the request.
func TestRetries_ConnectFailure(t *testing.T) {
	pAddr := closedAddr(t)
	d := newWorker(t, decodeJSON)
	h := newHarness(t, testConfig(), pAddr, d.addr)
	resp, _ := h.do("POST", "/v1/completions", `{"prompt":"a"}`, map[string]string{HeaderPrefillHost: pAddr, HeaderDecodeHost: d.addr})
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if got := counter(h.m.Retries.WithLabelValues(string(legPrefill))); got != DefaultMaxAttempts-1 {
		t.Errorf("retries{prefill} = %v, want %d", got, DefaultMaxAttempts-1)
	}
	if got := counter(h.m.UpstreamErrors.WithLabelValues(string(legPrefill), reasonConnect)); got != DefaultMaxAttempts {
		t.Errorf("upstream_errors{prefill,connect} = %v, want %d", got, DefaultMaxAttempts)
	}
}

// TestClientCancel_DuringPrefill: a client that goes away while P works cancels P's request,
// and D is never called.
func TestClientCancel_DuringPrefill(t *testing.T) {
	pGone := make(chan struct{})
	p := newWorker(t, func(_ http.ResponseWriter, r *http.Request, _ []byte) {
		<-r.Context().Done()
		close(pGone)
	})
	d := newWorker(t, decodeJSON)
	h := newHarness(t, testConfig(), p.addr, d.addr)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "POST", h.srv.URL+"/v1/completions", strings.NewReader(`{"prompt":"a"}`))
		for k, v := range routeHeaders(p, d) {
			req.Header.Set(k, v)
		}
		resp, err := h.srv.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	p.next(t) // P has the request
	cancel()
	select {
	case <-pGone:
	case <-time.After(5 * time.Second):
		t.Fatal("the prefill worker's request was not cancelled")
	}
	if err := <-errc; err == nil {
		t.Error("client got an answer after cancelling")
	}
	if n := d.count(); n != 0 {
		t.Errorf("decode worker got %d requests", n)
	}
}

// TestDecodeDiesMidStream: when D fails after its first token went out, the client sees a
// truncated stream (an error), not a clean end. Before its first token nothing has gone out
// (the sidecar holds a remote stream's opening events): the client gets a 502.
func TestDecodeDiesMidStream(t *testing.T) {
	t.Run("before_first_token", func(t *testing.T) {
		p := newWorker(t, prefillOK(pKV, 0))
		d := newWorker(t, func(w http.ResponseWriter, _ *http.Request, _ []byte) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, sseEvents[0])
			_ = http.NewResponseController(w).Flush()
			panic(http.ErrAbortHandler)
		})
		h := newHarness(t, testConfig(), p.addr, d.addr)
		resp, body := h.do("POST", "/v1/chat/completions", chatBody, routeHeaders(p, d))
		wantError(t, resp, body, http.StatusBadGateway, "decode_transport")
	})
	p := newWorker(t, prefillOK(pKV, 0))
	d := newWorker(t, func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, sseEvents[0]+sseEvents[1])
		_ = http.NewResponseController(w).Flush()
		panic(http.ErrAbortHandler) // the worker drops the connection mid-stream
	})
	h := newHarness(t, testConfig(), p.addr, d.addr)
	resp := h.send(context.Background(), "POST", "/v1/chat/completions", chatBody, routeHeaders(p, d))
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err == nil {
		t.Fatalf("clean end of a truncated stream: %q", got)
	}
	if string(got) != sseEvents[0]+sseEvents[1] {
		t.Errorf("got %q before the cut, want the first two events", got)
	}
	if n := counter(h.m.StreamAborts); n != 1 {
		t.Errorf("stream_aborts_total = %v", n)
	}
	if n := d.count(); n != 1 {
		t.Errorf("decode worker got %d requests, want 1 (no retry once bytes went out)", n)
	}
}
