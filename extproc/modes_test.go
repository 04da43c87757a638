package extproc

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

const (
	buffered   = filterv3.ProcessingMode_BUFFERED
	streamed   = filterv3.ProcessingMode_STREAMED
	fullDuplex = filterv3.ProcessingMode_FULL_DUPLEX_STREAMED
)

// sizedChatBody is a valid chat body of exactly n bytes (n >= 80).
func sizedChatBody(n int) []byte {
	head := `{"model":"qwen3","messages":[{"role":"user","content":"`
	tail := `"}]}`
	fill := n - len(head) - len(tail)
	words := strings.Repeat("lorem ipsum dolor sit amet ", fill/27+1)[:fill]
	return []byte(head + words + tail)
}

// sizedTokenBody is a valid /v1/completions body of at least n bytes with a token-id prompt.
func sizedTokenBody(n int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"model":"qwen3","prompt":[`)
	for i := 0; b.Len() < n-8; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(1000 + i%50000))
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

// fullDuplexExchange sends body in chunks of chunk bytes (then trailers, if asked) and
// returns the deferred headers response and the body written back.
func fullDuplexExchange(t *testing.T, v *envoy, path string, body []byte, chunk int, trailers bool) (*extprocv3.CommonResponse, []byte) {
	t.Helper()
	v.requestHeaders(false, ":method", "POST", ":path", path)
	sent := 0
	for sent < len(body) || (sent == 0 && !trailers) {
		n := min(chunk, len(body)-sent)
		last := sent+n == len(body)
		v.requestBody(body[sent:sent+n], last && !trailers)
		sent += n
		if last {
			break
		}
	}
	if trailers {
		v.requestTrailers()
	}
	hr := v.recv().GetRequestHeaders()
	if hr == nil {
		t.Fatal("first response is not the deferred headers response")
	}
	var got []byte
	for {
		r := v.recv()
		if r.GetRequestTrailers() != nil {
			if !trailers {
				t.Fatal("trailers response without request trailers")
			}
			break
		}
		sr := r.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		got = append(got, sr.GetBody()...)
		if sr.GetEndOfStream() {
			if trailers {
				t.Fatal("end_of_stream set although the body ended with trailers")
			}
			break
		}
	}
	return hr.GetResponse(), got
}

// TestFullDuplexWriteBack: envoy-extproc.md §7 row 2 — concatenation = input, EoS on the last
// chunk only, Content-Length = size, decision in the deferred headers response.
func TestFullDuplexWriteBack(t *testing.T) {
	e := newEnv(t, envOptions{})
	cases := []struct {
		name string
		path string
		body []byte
	}{
		{"61999", chatPath, sizedChatBody(61999)},
		{"62000", chatPath, sizedChatBody(62000)},
		{"62001", chatPath, sizedChatBody(62001)},
		{"124001", chatPath, sizedChatBody(124001)},
		{"10MiB", "/v1/completions", sizedTokenBody(DefaultMaxBodyBytes - 64)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := e.open(fullDuplex, fullDuplex)
			hr, got := fullDuplexExchange(t, v, c.path, c.body, 1<<20, false)
			h := setHeaders(hr)
			if h[HeaderRoute] == "" || !hr.ClearRouteCache {
				t.Fatalf("no decision in the deferred headers response: %v", h)
			}
			if h["content-length"] != strconv.Itoa(len(c.body)) {
				t.Fatalf("content-length %q, want %d", h["content-length"], len(c.body))
			}
			if !bytes.Equal(got, c.body) {
				t.Fatalf("written back %d bytes, want the %d input bytes unchanged", len(got), len(c.body))
			}
			v.closeAndDrain()
		})
	}
}

// TestFullDuplexChunkSizes: the body assembles across any chunking (down to 1 byte) and
// the decision does not depend on it.
func TestFullDuplexChunkSizes(t *testing.T) {
	e := newEnv(t, envOptions{})
	body := sizedChatBody(3000)
	var want map[string]string
	for _, chunk := range []int{1, 2, 3, 17, 1000, 2999, 3000} {
		v := e.open(fullDuplex, streamed)
		hr, got := fullDuplexExchange(t, v, chatPath, body, chunk, false)
		if !bytes.Equal(got, body) {
			t.Fatalf("chunk %d: body changed", chunk)
		}
		h := setHeaders(hr)
		delete(h, HeaderDecodeHost) // ties between equal decode workers are broken at random
		delete(h, HeaderDecision)
		if want == nil {
			want = h
		} else if !mapsEqual(h, want) {
			t.Fatalf("chunk %d: headers %v, want %v", chunk, h, want)
		}
		v.closeAndDrain()
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestFullDuplexTrailers: request trailers end the body; no chunk has end_of_stream and an
// empty TrailersResponse goes last.
func TestFullDuplexTrailers(t *testing.T) {
	e := newEnv(t, envOptions{})
	body := sizedChatBody(70000)
	v := e.open(fullDuplex, fullDuplex)
	hr, got := fullDuplexExchange(t, v, chatPath, body, 9000, true)
	if setHeaders(hr)[HeaderRoute] == "" || !bytes.Equal(got, body) {
		t.Fatal("trailers variant: no decision or body changed")
	}
	v.closeAndDrain()
}

// TestFullDuplexPassthroughEcho: bodies of other paths (0 bytes too) are written back chunk by
// chunk after an immediate headers response that drops Content-Length, cleaned of engine-control
// members (issue 23 item 1); a body that is not one JSON object is refused with vLLM's 400.
func TestFullDuplexPassthroughEcho(t *testing.T) {
	e := newEnv(t, envOptions{})
	big := append(append([]byte(`{"input":"`), bytes.Repeat([]byte("y"), 130000)...), `","kv_transfer_params":{"remote_host":"10.9.9.9"}}`...)
	for _, c := range []struct{ in, want string }{
		{"", ""}, {"{}", "{}"}, {string(big), string(big[:len(big)-len(`,"kv_transfer_params":{"remote_host":"10.9.9.9"}}`)]) + "}"},
		{`{"model":"m","vllm_xargs":{"kv_transfer_params":"x"},"input":"hi"}`, `{"model":"m","input":"hi"}`},
	} {
		for _, path := range []string{"/v1/responses", "/v1/messages", "/inference/v1/generate", "/v1/embeddings"} {
			v := e.open(fullDuplex, fullDuplex)
			v.requestHeaders(false, ":method", "POST", ":path", path, "content-length", strconv.Itoa(len(c.in)))
			hr := v.recv().GetRequestHeaders().GetResponse()
			h := setHeaders(hr)
			if h[HeaderRoute] != "decode" || !strings.Contains(h[HeaderDecision], "reason=passthrough") ||
				!slices.Contains(hr.GetHeaderMutation().GetRemoveHeaders(), "content-length") {
				t.Fatalf("passthrough headers %v, removed %v", h, hr.GetHeaderMutation().GetRemoveHeaders())
			}
			half := len(c.in) / 2
			v.requestBody([]byte(c.in[:half]), false)
			v.requestBody([]byte(c.in[half:]), true)
			var got []byte
			for {
				sr := v.recv().GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
				got = append(got, sr.GetBody()...)
				if sr.GetEndOfStream() {
					break
				}
			}
			if string(got) != c.want {
				t.Fatalf("%s: %d bytes written back, want %d (%.80q)", path, len(got), len(c.want), got)
			}
			v.closeAndDrain()
		}
	}
	v := e.open(fullDuplex, fullDuplex)
	v.requestHeaders(false, ":method", "POST", ":path", "/v1/responses")
	v.recv()
	v.requestBody([]byte("x"), true)
	expectImmediate(t, v.recv(), 400, "unreadable_body")
	v.closeAndDrain()
}

// TestDuplicateEndOfStream: a re-delivered last chunk after the body was complete gets no
// reply, no 400, and is counted (GIE #2988); the stream goes on.
func TestDuplicateEndOfStream(t *testing.T) {
	for _, mode := range []filterv3.ProcessingMode_BodySendMode{fullDuplex, buffered} {
		t.Run(mode.String(), func(t *testing.T) {
			e := newEnv(t, envOptions{})
			body := sizedChatBody(2000)
			v := e.open(mode, streamed)
			v.requestHeaders(false, ":method", "POST", ":path", chatPath)
			if mode == buffered {
				v.recv()
			}
			v.requestBody(body, true)
			v.recv()
			if mode == fullDuplex {
				v.recv() // the one written-back chunk
			}
			v.requestBody(body[len(body)-100:], true)
			v.responseHeaders(false, ":status", "200", "content-type", "application/json")
			if r := v.recv(); r.GetResponseHeaders() == nil {
				t.Fatalf("duplicate end of stream was answered: %v", r)
			}
			if got := testutil.ToFloat64(e.metrics.DuplicateEOS); got != 1 {
				t.Fatalf("duplicate counter = %v, want 1", got)
			}
			v.closeAndDrain()
		})
	}
}

// TestStreamedModeRoutesAtHeaders: STREAMED cannot carry a body-time decision, so the request
// is routed at the headers (passthrough, Content-Length dropped) and counted; every chunk is
// answered with its cleaned form, which cuts a client's kv_transfer_params (issue 23 item 1).
func TestStreamedModeRoutesAtHeaders(t *testing.T) {
	e := newEnv(t, envOptions{})
	v := e.open(streamed, streamed)
	v.requestHeaders(false, ":method", "POST", ":path", chatPath)
	hr := v.recv().GetRequestHeaders().GetResponse()
	h := setHeaders(hr)
	if h[HeaderRoute] != "decode" || !strings.Contains(h[HeaderDecision], "reason=passthrough") ||
		!slices.Contains(hr.GetHeaderMutation().GetRemoveHeaders(), "content-length") {
		t.Fatalf("headers %v", h)
	}
	body := sizedChatBody(500)
	attack := []byte(`,"kv_transfer_params":{"do_remote_prefill":true,"remote_host":"10.9.9.9"}}`)
	in := append(append([]byte(nil), body[:len(body)-1]...), attack...)
	var got []byte
	for i := 0; i < len(in); i += 100 {
		end := min(i+100, len(in))
		v.requestBody(in[i:end], end == len(in))
		r := v.recv().GetRequestBody().GetResponse()
		got = append(got, r.GetBodyMutation().GetBody()...)
	}
	if !sameJSONObject(got, body) {
		t.Fatalf("cleaned body %.200q, want %.200q", got, body)
	}
	if got := testutil.ToFloat64(e.metrics.StreamedBodyMode); got != 1 {
		t.Fatalf("streamed-mode counter = %v", got)
	}
	if got := testutil.ToFloat64(e.metrics.StrippedFields.WithLabelValues("kv_transfer_params")); got != 1 {
		t.Fatalf("stripped counter = %v", got)
	}
	v.closeAndDrain()
}

func sameJSONObject(a, b []byte) bool {
	var x, y map[string]any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

// TestBodylessAndPassthrough: GET /v1/models and POST to other paths route to the decode
// worker with the fewest requests, reason passthrough, nothing booked, body untouched.
func TestBodylessAndPassthrough(t *testing.T) {
	e := newEnv(t, envOptions{})
	for _, mode := range []filterv3.ProcessingMode_BodySendMode{buffered, streamed, fullDuplex} {
		v := e.open(mode, streamed)
		v.requestHeaders(true, ":method", "GET", ":path", "/v1/models")
		hr := v.recv().GetRequestHeaders().GetResponse()
		h := setHeaders(hr)
		if h[HeaderRoute] != "decode" || (h[HeaderDestination] != d0Addr && h[HeaderDestination] != d1Addr) || !hr.ClearRouteCache {
			t.Fatalf("%v bodyless: %v", mode, h)
		}
		v.closeAndDrain()
	}
	v := e.open(buffered, streamed)
	v.requestHeaders(false, ":method", "POST", ":path", "/v1/embeddings")
	if h := setHeaders(v.recv().GetRequestHeaders().GetResponse()); h[HeaderRoute] != "decode" {
		t.Fatalf("passthrough POST: %v", h)
	}
	v.requestBody([]byte(`{"input":"x"}`), true)
	if r := v.recv().GetRequestBody(); r == nil || r.GetResponse() != nil {
		t.Fatalf("passthrough body reply %v, want empty", r)
	}
	v.closeAndDrain()
	if e.totalRequests() != 0 {
		t.Fatal("passthrough booked a worker")
	}
}

// TestHeaderStripping: conditional-disagg.md §3 step 0 / R1 — every router header the client
// sent (mixed case, duplicates, unknown x-condisagg-*) is removed; a client cannot force a
// route or a host.
func TestHeaderStripping(t *testing.T) {
	e := newEnv(t, envOptions{})
	v := e.open(buffered, streamed)
	v.requestHeaders(false, ":method", "POST", ":path", chatPath,
		"X-Condisagg-Route", "decode", "x-condisagg-route", "decode", "x-bypass-remote-prefill", "true",
		"X-Gateway-Destination-route.Endpoint", "6.6.6.6:80", "x-prefiller-host-port", "6.6.6.6:81",
		"x-condisagg-pin", "d1", "x-prefill-continue", "1")
	strip := v.recv().GetRequestHeaders().GetResponse().GetHeaderMutation().GetRemoveHeaders()
	for _, want := range append(stripHeaders[:], "x-condisagg-pin") {
		if !contains(strip, want) {
			t.Fatalf("remove_headers %v lacks %s", strip, want)
		}
	}
	v.requestBody(chatBody("hi", false), true)
	br := v.recv().GetRequestBody().GetResponse()
	h := setHeaders(br)
	if h[HeaderRoute] != "prefill" || h[HeaderDestination] != p0Addr {
		t.Fatalf("client headers influenced the decision: %v", h)
	}
	if !contains(br.GetHeaderMutation().GetRemoveHeaders(), HeaderPrefillerLLD) {
		t.Fatal("decision does not strip again")
	}
	v.closeAndDrain()
}

// TestCompletionsEndpoint: /v1/completions with a string prompt and with token ids.
func TestCompletionsEndpoint(t *testing.T) {
	e := newEnv(t, envOptions{settings: func(s *Settings) { s.LLMDCompat = true }})
	for _, body := range []string{`{"model":"qwen3","prompt":"Once upon a time"}`, `{"model":"qwen3","prompt":[1,2,3,4,5]}`} {
		v := e.open(buffered, streamed)
		v.requestHeaders(false, ":method", "POST", ":path", "/v1/completions")
		v.recv()
		v.requestBody([]byte(body), true)
		h := setHeaders(v.recv().GetRequestBody().GetResponse())
		if h[HeaderRoute] != "prefill" || h[HeaderPrefillerLLD] != p0Addr {
			t.Fatalf("%s: %v", body, h)
		}
		if !strings.HasPrefix(h[HeaderDecision], "route=prefill;reason=remote_ratio_too_high;isl=") {
			t.Fatalf("decision header %q", h[HeaderDecision])
		}
		v.closeAndDrain()
	}
	// Envoy closed both streams before any response: the bookings were released as cancels.
	if e.totalRequests() != 0 || testutil.ToFloat64(e.metrics.Cancelled) != 2 {
		t.Fatalf("bookings = %d, cancelled = %v; want 0 and 2", e.totalRequests(), testutil.ToFloat64(e.metrics.Cancelled))
	}
}

// TestBodyModeNone: with request body mode NONE no body ever comes, so a completion request
// is routed at its headers.
func TestBodyModeNone(t *testing.T) {
	e := newEnv(t, envOptions{})
	v := e.open(filterv3.ProcessingMode_NONE, streamed)
	v.requestHeaders(false, ":method", "POST", ":path", chatPath)
	if h := setHeaders(v.recv().GetRequestHeaders().GetResponse()); h[HeaderRoute] != "decode" {
		t.Fatalf("NONE mode: %v", h)
	}
	v.closeAndDrain()
}

// TestKVTransferParamsStripped: a client's kv_transfer_params (plain, escaped or repeated)
// never goes upstream: BUFFERED replaces the body, full duplex writes it back without it, on
// both the bypass and the remote route; a body without it is not mutated.
func TestKVTransferParamsStripped(t *testing.T) {
	e := newEnv(t, envOptions{})
	smuggled := `{"model":"qwen3","kv_transfer_params":{"do_remote_prefill":true,"remote_host":"10.9.9.9","remote_port":1},` +
		`"messages":[{"role":"user","content":"hello there"}],"kv\u005ftransfer_params":{"remote_block_ids":[1]}}`
	clean := `{"model":"qwen3","messages":[{"role":"user","content":"hello there"}]}`
	check := func(t *testing.T, got []byte) {
		t.Helper()
		if string(got) != clean {
			t.Fatalf("upstream body %s, want %s", got, clean)
		}
	}
	t.Run("buffered", func(t *testing.T) {
		v := e.open(buffered, streamed)
		v.requestHeaders(false, ":method", "POST", ":path", chatPath)
		v.recv()
		v.requestBody([]byte(smuggled), true)
		c := v.recv().GetRequestBody().GetResponse()
		if setHeaders(c)[HeaderRoute] == "" {
			t.Fatal("no decision")
		}
		check(t, c.GetBodyMutation().GetBody())
		v.closeAndDrain()
	})
	t.Run("full_duplex", func(t *testing.T) {
		v := e.open(fullDuplex, fullDuplex)
		hr, got := fullDuplexExchange(t, v, chatPath, []byte(smuggled), 17, false)
		if setHeaders(hr)["content-length"] != strconv.Itoa(len(clean)) {
			t.Fatalf("content-length %q, want %d", setHeaders(hr)["content-length"], len(clean))
		}
		check(t, got)
		v.closeAndDrain()
	})
	t.Run("clean_body_untouched", func(t *testing.T) {
		v := e.open(buffered, streamed)
		v.requestHeaders(false, ":method", "POST", ":path", chatPath)
		v.recv()
		v.requestBody([]byte(clean), true)
		if c := v.recv().GetRequestBody().GetResponse(); c.GetBodyMutation() != nil {
			t.Fatalf("clean body mutated: %v", c.GetBodyMutation())
		}
		v.closeAndDrain()
	})
	if got := testutil.ToFloat64(e.metrics.StrippedFields.WithLabelValues("kv_transfer_params")); got != 4 {
		t.Fatalf("stripped fields counted %v, want 4 (two per smuggling request)", got)
	}
}
