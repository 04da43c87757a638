package sidecar

import (
	"bytes"
	"encoding/json"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

func seedBodies(f *testing.F, pattern string) [][]byte {
	f.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "bodies", pattern))
	if err != nil || len(files) == 0 {
		f.Fatalf("no seeds %s: %v", pattern, err)
	}
	var out [][]byte
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// asMap decodes an output body the way a JSON parser on the worker would (last duplicate wins).
func asMap(t *testing.T, what string, b []byte) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s is not a JSON object: %v\n%s", what, err, b)
	}
	return m
}

// FuzzRewrite: for any input that parses, the leg bodies are valid JSON objects with the
// required fields, and every other field reaches the worker with its value unchanged.
func FuzzRewrite(f *testing.F) {
	for _, b := range seedBodies(f, "*.json") {
		f.Add(b)
	}
	f.Add([]byte(`{}`))
	f.Add([]byte(` { "a" : [ 1 , { "b" : "}" } ] } `))
	const pkv = `{"remote_block_ids": [1, 2],"x":{"y":null}}`
	f.Fuzz(func(t *testing.T, body []byte) {
		obj, err := parseObject(body)
		if err != nil {
			return
		}
		for _, path := range []string{pathChatCompletions, pathResponses} {
			pm := asMap(t, "prefill body", prefillBody(obj, path))
			limit := keyMaxTokens
			if path == pathResponses {
				limit = keyMaxOutputTokens
			}
			want := map[string]string{keyStream: "false", limit: "1", keyKVTransferParams: prefillKVTransferParams}
			if obj.has(keyMaxCompletionTokens) {
				want[keyMaxCompletionTokens] = "1"
			}
			for k, v := range want {
				if string(pm[k]) != v {
					t.Fatalf("prefill body %s = %s, want %s", k, pm[k], v)
				}
			}
			for _, k := range []string{keyStreamOptions, keyMinTokens, keyMinCompletionTokens} {
				if _, ok := pm[k]; ok {
					t.Fatalf("prefill body keeps %s", k)
				}
			}
			checkOthers(t, obj, pm, keyStream, limit, keyMaxCompletionTokens, keyKVTransferParams,
				keyStreamOptions, keyMinTokens, keyMinCompletionTokens)
		}
		dm := asMap(t, "decode body", decodeBody(obj, []byte(pkv)))
		if string(dm[keyKVTransferParams]) != pkv {
			t.Fatalf("decode kv_transfer_params = %s, want %s verbatim", dm[keyKVTransferParams], pkv)
		}
		checkOthers(t, obj, dm, keyKVTransferParams)
		lm := asMap(t, "local body", localBody(obj))
		if _, ok := lm[keyKVTransferParams]; ok {
			t.Fatal("local body keeps kv_transfer_params")
		}
		checkOthers(t, obj, lm, keyKVTransferParams)
	})
}

// checkOthers: every key of the input other than the edited ones has its (last) value.
func checkOthers(t *testing.T, in object, out map[string]json.RawMessage, edited ...string) {
	t.Helper()
	skip := map[string]bool{}
	for _, k := range edited {
		skip[k] = true
	}
	for _, m := range in.members {
		if skip[m.key] || !utf8.ValidString(m.key) {
			continue
		}
		if got := out[m.key]; !bytes.Equal(got, in.last(m.key)) {
			t.Fatalf("field %q = %s, want %s", m.key, got, in.last(m.key))
		}
	}
}

// FuzzPrefillAnswer: P's answer never panics the parser; an accepted kv_transfer_params is a
// valid JSON object taken from the input.
func FuzzPrefillAnswer(f *testing.F) {
	for _, b := range seedBodies(f, "prefill_answer_*.json") {
		f.Add(b)
	}
	f.Add([]byte(`{"kv_transfer_params":null}`))
	f.Add([]byte(`{"kv_transfer_params":{},"usage":{"prompt_tokens_details":{"cached_tokens":-1}}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		ans, err := parsePrefillAnswer(body)
		if err != nil {
			return
		}
		if !json.Valid(ans.kvTransferParams) || ans.kvTransferParams[0] != '{' || !bytes.Contains(body, ans.kvTransferParams) {
			t.Fatalf("kv_transfer_params %q", ans.kvTransferParams)
		}
		if ans.cachedKnown && ans.cachedTokens < 0 {
			t.Fatalf("negative cached tokens %d", ans.cachedTokens)
		}
	})
}

// FuzzSSEUsage: rewriting a stream fed in two pieces gives the same bytes as feeding it whole,
// and rewritten data lines stay valid JSON.
func FuzzSSEUsage(f *testing.F) {
	for _, b := range seedBodies(f, "*.sse") {
		f.Add(b, uint16(10))
		f.Add(b, uint16(200))
	}
	f.Add([]byte("data: {\"usage\":{}}\r\n\r\n"), uint16(3))
	f.Fuzz(func(t *testing.T, in []byte, cut uint16) {
		r := newUsageRewriter(prefillAnswer{cachedTokens: 5, cachedKnown: true})
		whole := &sseUsage{u: r, maxLineBytes: 1 << 20}
		want := whole.finish(whole.feed(nil, in))
		c := int(cut) % (len(in) + 1)
		s := &sseUsage{u: r, maxLineBytes: 1 << 20}
		got := s.finish(s.feed(s.feed(nil, in[:c]), in[c:]))
		if !bytes.Equal(got, want) {
			t.Fatalf("split at %d:\n got %q\nwant %q", c, got, want)
		}
		if whole.rewrites == 0 && !bytes.Equal(want, in) {
			t.Fatalf("nothing rewritten but output differs:\n got %q\n  in %q", want, in)
		}
	})
}

// FuzzCanonicalHostPort: the routing-header check never panics, and what it accepts is
// canonical (idempotent), a plain host:port, and free of URL syntax.
func FuzzCanonicalHostPort(f *testing.F) {
	data, err := os.ReadFile(filepath.Join("testdata", "hostports.txt"))
	if err != nil {
		f.Fatal(err)
	}
	for line := range strings.SplitSeq(strings.TrimSpace(string(data)), "\n") {
		f.Add(line)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := canonicalHostPort(s)
		if err != nil {
			return
		}
		if again, err := canonicalHostPort(c); err != nil || again != c {
			t.Fatalf("canonical(%q) = %q, again %q, %v", s, c, again, err)
		}
		host, port, err := net.SplitHostPort(c)
		if err != nil || host == "" || port == "" || strings.ContainsAny(c, "/?#@ ") {
			t.Fatalf("accepted %q as %q", s, c)
		}
		u, err := url.Parse("http://" + c + "/x")
		if err != nil || u.Host != c || u.User != nil || u.Path != "/x" {
			t.Fatalf("%q does not make a URL with host %q: %v", c, c, err)
		}
	})
}

// FuzzParseWorkerEndpoints: a config file never panics the worker-list reader.
func FuzzParseWorkerEndpoints(f *testing.F) {
	data, err := os.ReadFile(filepath.Join("testdata", "workers.yaml"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Add([]byte("workers: [{endpoint: 1}]"))
	f.Fuzz(func(t *testing.T, in []byte) {
		eps, err := ParseWorkerEndpoints(in)
		if err == nil && len(eps) == 0 {
			t.Fatal("no error and no endpoints")
		}
	})
}

// FuzzPeekFirstToken: whatever D streams, the peek returns a prefix of it and the rest follows
// unchanged (nothing is lost or reordered), it never holds much more than its limit, and an
// error verdict comes only with an error event in what it held.
func FuzzPeekFirstToken(f *testing.F) {
	f.Add([]byte(strings.Join(sseEvents, "")), 64)
	f.Add([]byte(sseEvents[0]+"data: {\"error\": {\"code\": 500}}\n\ndata: [DONE]\n\n"), 1<<10)
	f.Add([]byte("data: {\"choices\":[{\"delta\":{}}]}\r\n\r\n: ping\n\n"), 16)
	f.Fuzz(func(t *testing.T, stream []byte, limit int) {
		limit = max(0, limit%(4<<10))
		r := &chunkReader{data: stream, size: 1 + len(stream)%13}
		held, errEvent, err := peekFirstToken(r, limit)
		rest := r.data
		if !bytes.Equal(append(append([]byte(nil), held...), rest...), stream) {
			t.Fatalf("held %q + rest %q is not the stream %q", held, rest, stream)
		}
		if len(held) > limit+4<<10+13 {
			t.Fatalf("held %d bytes for a limit of %d", len(held), limit)
		}
		if errEvent && (err != nil || !bytes.Contains(held, []byte("error"))) {
			t.Fatalf("error verdict on %q (err %v)", held, err)
		}
	})
}
