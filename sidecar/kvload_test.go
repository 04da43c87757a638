package sidecar

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
)

// pKV032 is a vLLM 0.32 prefill answer's kv_transfer_params (measured on a real pair): block
// ids per KV cache group, the prompt length, and P's own prefix-cache hit.
const pKV032 = `{"do_remote_prefill": true, "do_remote_decode": false, "remote_block_ids": [[10, 11]], "remote_engine_id": "2278c418", "remote_request_id": "cmpl-1", "remote_host": "127.0.0.1", "remote_port": 5701, "tp_size": 1, "remote_num_tokens": 40, "remote_prefill_cached_tokens": 32, "transfer_mode": "pull"}`

// TestRemote_DecodeLegWithoutPrefillHit: vLLM 0.32 reports remote_prefill_cached_tokens as the
// decode answer's cached_tokens when the decode leg carries it, whatever D loaded. The sidecar
// removes it from the decode leg (every other byte of P's params verbatim), tells the router
// P's hit in a header, and says the decode leg pulled the KV.
func TestRemote_DecodeLegWithoutPrefillHit(t *testing.T) {
	p := newWorker(t, prefillOK(pKV032, 0))
	d := newWorker(t, decodeJSON)
	h := newHarness(t, testConfig(), p.addr, d.addr)
	resp, _ := h.do("POST", "/v1/completions", `{"prompt":"abc","max_tokens":4}`, routeHeaders(p, d))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	want := `{"prompt":"abc","max_tokens":4,"kv_transfer_params":{"do_remote_prefill":true,"do_remote_decode":false,"remote_block_ids":[[10, 11]],"remote_engine_id":"2278c418","remote_request_id":"cmpl-1","remote_host":"127.0.0.1","remote_port":5701,"tp_size":1,"remote_num_tokens":40,"transfer_mode":"pull"}}`
	mustEqualBytes(t, "decode leg body", d.next(t).body, []byte(want))
	if got := resp.Header.Get(HeaderPrefillCachedTokens); got != "32" {
		t.Errorf("%s = %q, want P's remote_prefill_cached_tokens 32 (not its usage's 0)", HeaderPrefillCachedTokens, got)
	}
	if got := resp.Header.Get(HeaderKVTransfer); got != KVTransferPulled {
		t.Errorf("%s = %q, want %q", HeaderKVTransfer, got, KVTransferPulled)
	}

	// Before 0.32 the params have no such key: they go to D byte for byte, and P's usage
	// gives its hit.
	p2 := newWorker(t, prefillOK(pKV, 7))
	h2 := newHarness(t, testConfig(), p2.addr, d.addr)
	resp, _ = h2.do("POST", "/v1/completions", `{"prompt":"abc"}`, routeHeaders(p2, d))
	mustEqualBytes(t, "decode leg body", d.next(t).body, []byte(`{"prompt":"abc","kv_transfer_params":`+pKV+`}`))
	if got := resp.Header.Get(HeaderPrefillCachedTokens); got != "7" {
		t.Errorf("%s = %q, want P's usage 7", HeaderPrefillCachedTokens, got)
	}
}

// kvLoadFailsOnce answers a decode leg that carries kv_transfer_params as vLLM's engine does when
// the KV load fails under kv_load_failure_policy "fail" (measured on a real pair), and any other
// request with ok.
func kvLoadFailsOnce(ok func(http.ResponseWriter, *http.Request, []byte)) func(http.ResponseWriter, *http.Request, []byte) {
	return func(w http.ResponseWriter, r *http.Request, body []byte) {
		if !bytes.Contains(body, []byte(`"kv_transfer_params"`)) {
			ok(w, r, body)
			return
		}
		if !bytes.Contains(body, []byte(`"stream":true`)) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, `{"error":{"message":"Internal server error","type":"InternalServerError","param":null,"code":500}}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		_, _ = io.WriteString(w, sseEvents[0]+
			"data: {\"error\": {\"message\": \"Internal server error\", \"type\": \"InternalServerError\", \"param\": null, \"code\": 500}}\n\n"+
			"data: [DONE]\n\n")
	}
}

// TestRemote_KVLoadFailureRetriedLocally: a decode leg whose KV load failed (500, or an error
// event before the first token in a stream) is sent to D again without kv_transfer_params; the
// client gets only the second answer, marked failed for the router, and the retry is counted.
func TestRemote_KVLoadFailureRetriedLocally(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		ok         func(http.ResponseWriter, *http.Request, []byte)
		want       string
	}{
		{"non_streamed_500", `{"model":"m","messages":[],"max_tokens":5}`, decodeJSON, decodeJSONAnswer},
		{"stream_error_event", chatBody, decodeSSE(nil), strings.Join(sseEvents, "")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newWorker(t, prefillOK(pKV032, 0))
			d := newWorker(t, kvLoadFailsOnce(tc.ok))
			h := newHarness(t, testConfig(), p.addr, d.addr)
			resp, body := h.do("POST", "/v1/chat/completions", tc.body, routeHeaders(p, d))
			if resp.StatusCode != http.StatusOK || body != tc.want {
				t.Fatalf("client got %d %q, want 200 %q", resp.StatusCode, body, tc.want)
			}
			if got := resp.Header.Get(HeaderKVTransfer); got != KVTransferFailed {
				t.Errorf("%s = %q, want %q", HeaderKVTransfer, got, KVTransferFailed)
			}
			if resp.Header.Get(HeaderPrefillMs) == "" || resp.Header.Get(HeaderPrefillCachedTokens) != "32" {
				t.Errorf("prefill report missing: %v", resp.Header)
			}
			first, retry := d.next(t), d.next(t)
			if !bytes.Contains(first.body, []byte(`"remote_engine_id"`)) {
				t.Fatalf("first decode leg without P's params: %s", first.body)
			}
			mustEqualBytes(t, "local retry body", retry.body, []byte(tc.body))
			if first.header.Get(HeaderRequestID) != retry.header.Get(HeaderRequestID) {
				t.Errorf("retry changed the request id")
			}
			if got := counter(h.m.KVLoadFailures); got != 1 {
				t.Errorf("kv_load_failures_total = %v, want 1", got)
			}
			if got := counter(h.m.Requests.WithLabelValues(modeKVRetry, "200")); got != 1 {
				t.Errorf("requests_total{kv_load_retry,200} = %v, want 1", got)
			}
		})
	}
}

// TestRemote_DecodeErrorAfterFirstTokenNotRetried: an error event after output has gone out is
// the client's to see; nothing is retried.
func TestRemote_DecodeErrorAfterFirstTokenNotRetried(t *testing.T) {
	stream := sseEvents[0] + sseEvents[1] + "data: {\"error\": {\"message\": \"boom\", \"code\": 500}}\n\ndata: [DONE]\n\n"
	p := newWorker(t, prefillOK(pKV032, 0))
	d := newWorker(t, func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, stream)
	})
	h := newHarness(t, testConfig(), p.addr, d.addr)
	resp, body := h.do("POST", "/v1/chat/completions", chatBody, routeHeaders(p, d))
	if resp.StatusCode != 200 || body != stream || resp.Header.Get(HeaderKVTransfer) != KVTransferPulled {
		t.Fatalf("got %d %q %v", resp.StatusCode, body, resp.Header)
	}
	if d.count() != 1 || counter(h.m.KVLoadFailures) != 0 {
		t.Fatalf("decode legs %d, kv_load_failures_total %v; want 1 and 0", d.count(), counter(h.m.KVLoadFailures))
	}
}

// TestRemote_PrefillFailureSaysFallback: the local fallback after a failed prefill leg is
// reported to the router as such.
func TestRemote_PrefillFailureSaysFallback(t *testing.T) {
	p := newWorker(t, statusAnswer(http.StatusInternalServerError))
	d := newWorker(t, decodeJSON)
	h := newHarness(t, testConfig(), p.addr, d.addr)
	resp, _ := h.do("POST", "/v1/completions", `{"prompt":"abc"}`, routeHeaders(p, d))
	if resp.StatusCode != 200 || resp.Header.Get(HeaderKVTransfer) != KVTransferFallback || resp.Header.Get(HeaderPrefillCachedTokens) != "" {
		t.Fatalf("got %d %v", resp.StatusCode, resp.Header)
	}
}

// TestPeekFirstToken: what the peek holds back and how it judges the opening events.
func TestPeekFirstToken(t *testing.T) {
	role := sseEvents[0]
	errEv := "data: {\"error\": {\"message\": \"Internal server error\", \"code\": 500}}\n\n"
	for _, tc := range []struct {
		name, in string
		limit    int
		held     string
		errEvent bool
		err      error
	}{
		{"first_token_after_role", role + sseEvents[1] + sseEvents[2], 1 << 20, role + sseEvents[1] + sseEvents[2], false, nil},
		{"error_after_role", role + errEv + "data: [DONE]\n\n", 1 << 20, role + errEv + "data: [DONE]\n\n", true, nil},
		{"completion_error_first", errEv, 1 << 20, errEv, true, nil},
		{"crlf_lines", strings.ReplaceAll(role+errEv, "\n", "\r\n"), 1 << 20, strings.ReplaceAll(role+errEv, "\n", "\r\n"), true, nil},
		{"done_first", "data: [DONE]\n\n", 1 << 20, "data: [DONE]\n\n", false, nil},
		{"comment_then_token", ": ping\n\n" + sseEvents[1], 1 << 20, ": ping\n\n" + sseEvents[1], false, nil},
		{"not_json_is_output", "data: {oops\n\n", 1 << 20, "data: {oops\n\n", false, nil},
		{"stream_ends_in_prelude", role, 1 << 20, role, false, io.EOF},
		{"limit_gives_up", role + role + errEv, len(role), role + role + errEv, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &chunkReader{data: []byte(tc.in), size: 7}
			held, errEvent, err := peekFirstToken(r, tc.limit)
			rest, _ := io.ReadAll(r)
			if got := string(held) + string(rest); got != tc.in {
				t.Fatalf("held + rest = %q, want the input %q", got, tc.in)
			}
			if errEvent != tc.errEvent || err != tc.err {
				t.Fatalf("errEvent %v err %v, want %v %v", errEvent, err, tc.errEvent, tc.err)
			}
			if tc.name == "limit_gives_up" && len(held) > tc.limit+7 {
				t.Fatalf("held %d bytes past a limit of %d", len(held), tc.limit)
			}
			if tc.name != "limit_gives_up" && !strings.HasPrefix(tc.held, string(held)) {
				t.Fatalf("held %q, want a prefix of %q", held, tc.held)
			}
		})
	}
}

// chunkReader returns data size bytes at a time, as a network read might.
type chunkReader struct {
	data []byte
	size int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), c.size)], c.data)
	c.data = c.data[n:]
	return n, nil
}
