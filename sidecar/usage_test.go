package sidecar

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
)

// TestUsageRewrite_Proxy: with UsageFromPrefill, D's cached_tokens becomes P's (§6.3 step 6).
func TestUsageRewrite_Proxy(t *testing.T) {
	wantSSE := strings.Join(sseEvents[:3], "") +
		"data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":40,\"completion_tokens\":2,\"total_tokens\":42,\"prompt_tokens_details\":{\"cached_tokens\":16}}}\n\n" +
		sseEvents[4]
	cases := []struct {
		name, spec string
		usage      UsageRewrite
		pCached    int
		body, want string
	}{
		{"stream_rewritten", "6.3 step 6", UsageFromPrefill, 16, chatBody, wantSSE},
		{"stream_off_unchanged", "6.3 step 6", UsageAsIs, 16, chatBody, strings.Join(sseEvents, "")},
		{"json_rewritten", "6.3 step 6", UsageFromPrefill, 16, `{"prompt":"a"}`, strings.Replace(decodeJSONAnswer, `"cached_tokens":48`, `"cached_tokens":16`, 1)},
		{"json_zero_is_null", "6.3 step 6", UsageFromPrefill, 0, `{"prompt":"a"}`, strings.Replace(decodeJSONAnswer, `"cached_tokens":48`, `"cached_tokens":null`, 1)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newWorker(t, prefillOK(pKV, tc.pCached))
			d := newWorker(t, func(w http.ResponseWriter, r *http.Request, b []byte) {
				if bytes.Contains(b, []byte(`"stream":true`)) {
					decodeSSE(nil)(w, r, b)
					return
				}
				decodeJSON(w, r, b)
			})
			cfg := testConfig()
			cfg.Usage = tc.usage
			h := newHarness(t, cfg, p.addr, d.addr)
			resp, body := h.do("POST", "/v1/chat/completions", tc.body, routeHeaders(p, d))
			if resp.StatusCode != 200 || body != tc.want {
				t.Fatalf("status %d\n got %q\nwant %q", resp.StatusCode, body, tc.want)
			}
		})
	}
}

func TestUsageRewriter_JSON(t *testing.T) {
	r16 := newUsageRewriter(prefillAnswer{cachedTokens: 16, cachedKnown: true})
	rNull := newUsageRewriter(prefillAnswer{})
	cases := []struct {
		name    string
		r       usageRewriter
		in      string
		want    string
		changed bool
	}{
		{"replace", r16, `{"a":1,"usage":{"prompt_tokens":3,"prompt_tokens_details":{"cached_tokens":48,"x":1}}}`,
			`{"a":1,"usage":{"prompt_tokens":3,"prompt_tokens_details":{"cached_tokens":16,"x":1}}}`, true},
		{"create_details", r16, `{"usage":{"prompt_tokens":3}}`, `{"usage":{"prompt_tokens":3,"prompt_tokens_details":{"cached_tokens":16}}}`, true},
		{"create_details_from_null", r16, `{"usage":{"prompt_tokens_details":null}}`, `{"usage":{"prompt_tokens_details":{"cached_tokens":16}}}`, true},
		{"null_when_unknown", rNull, `{"usage":{"prompt_tokens_details":{"cached_tokens":48}}}`, `{"usage":{"prompt_tokens_details":{"cached_tokens":null}}}`, true},
		{"null_not_created", rNull, `{"usage":{"prompt_tokens":3}}`, `{"usage":{"prompt_tokens":3}}`, false},
		{"usage_null", r16, `{"usage":null}`, `{"usage":null}`, false},
		{"no_usage", r16, `{"choices":[]}`, `{"choices":[]}`, false},
		{"not_json", r16, `{"usage":`, `{"usage":`, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, changed := tc.r.rewriteJSON([]byte(tc.in))
			if string(got) != tc.want || changed != tc.changed {
				t.Fatalf("got %s (%v), want %s (%v)", got, changed, tc.want, tc.changed)
			}
		})
	}
}

// TestSSEUsage_SplitAnywhere feeds a stream split at every byte offset: the output is the same
// as for the whole stream, and complete lines are never held back.
func TestSSEUsage_SplitAnywhere(t *testing.T) {
	in := []byte(strings.Join(sseEvents, "") + "data: {\"usage\":{\"prompt_tokens_details\":{\"cached_tokens\":1}}}\r\n\r\n: comment\n")
	r := newUsageRewriter(prefillAnswer{cachedTokens: 7, cachedKnown: true})
	whole := (&sseUsage{u: r, maxLineBytes: 1 << 20}).feed(nil, in)
	if !bytes.Contains(whole, []byte(`"cached_tokens":7}}}`+"\r\n")) || bytes.Contains(whole, []byte(`"cached_tokens":48`)) {
		t.Fatalf("whole-stream rewrite: %s", whole)
	}
	for cut := 0; cut <= len(in); cut++ {
		s := &sseUsage{u: r, maxLineBytes: 1 << 20}
		first := s.feed(nil, in[:cut])
		if nl := bytes.LastIndexByte(in[:cut], '\n'); nl >= 0 && len(first) == 0 {
			t.Fatalf("cut %d: complete lines held back", cut)
		}
		got := s.finish(s.feed(first, in[cut:]))
		if !bytes.Equal(got, whole) {
			t.Fatalf("cut %d:\n got %q\nwant %q", cut, got, whole)
		}
	}
}

func TestSSEUsage_LongLineSwitchesOff(t *testing.T) {
	s := &sseUsage{u: newUsageRewriter(prefillAnswer{}), maxLineBytes: 8}
	out := s.feed(nil, []byte("data: {\"usage\":{}"))
	out = s.feed(out, []byte("}\n"))
	if !s.off || string(out) != "data: {\"usage\":{}}\n" {
		t.Fatalf("off=%v out=%q", s.off, out)
	}
}
