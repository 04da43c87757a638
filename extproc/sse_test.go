package extproc

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sseSummary is everything a stream revealed, folded over its chunks.
type sseSummary struct {
	firstTokenChunk int // index of the chunk whose feed reported the first token; -1 none
	tokens          int // number of FirstToken reports (must be <= 1)
	done, errored   bool
	usage           Usage
	hasUsage        bool
}

func feedAll(chunks [][]byte) sseSummary {
	var p sseParser
	s := sseSummary{firstTokenChunk: -1}
	for i, c := range chunks {
		obs := p.Feed(c)
		if obs.FirstToken {
			s.tokens++
			if s.firstTokenChunk < 0 {
				s.firstTokenChunk = i
			}
		}
		s.done = s.done || obs.Done
		s.errored = s.errored || obs.Error
		if obs.HasUsage {
			s.usage, s.hasUsage = obs.Usage, true
		}
	}
	return s
}

// TestSSESplitAtEveryOffset: envoy-extproc.md §7 — splitting the stream at any byte gives
// the same first token and usage as the unsplit stream (higress#4248 cases), with LF and CRLF.
func TestSSESplitAtEveryOffset(t *testing.T) {
	lf := readFixture(t, "vllm_chat_stream_usage.sse")
	crlf := bytes.ReplaceAll(lf, []byte("\n"), []byte("\r\n"))
	for name, stream := range map[string][]byte{"lf": lf, "crlf": crlf} {
		whole := feedAll([][]byte{stream})
		want := Usage{PromptTokens: 12, CompletionTokens: 2, CachedTokens: 8}
		if whole.tokens != 1 || !whole.done || !whole.hasUsage || whole.usage != want {
			t.Fatalf("%s unsplit: %+v", name, whole)
		}
		firstEnd := bytes.Index(stream, []byte("\n\n"))
		if name == "crlf" {
			firstEnd = bytes.Index(stream, []byte("\r\n\r\n")) + 2
		}
		for cut := 0; cut <= len(stream); cut++ {
			got := feedAll([][]byte{stream[:cut], stream[cut:]})
			if got.tokens != 1 || !got.done || got.usage != want {
				t.Fatalf("%s cut %d: %+v", name, cut, got)
			}
			// The first event is complete once its blank line has arrived.
			wantChunk := 1
			if cut >= firstEnd+2 {
				wantChunk = 0
			}
			if got.firstTokenChunk != wantChunk {
				t.Fatalf("%s cut %d: first token in chunk %d, want %d", name, cut, got.firstTokenChunk, wantChunk)
			}
		}
	}
}

func TestSSEByteByByte(t *testing.T) {
	stream := readFixture(t, "vllm_chat_stream_usage.sse")
	chunks := make([][]byte, len(stream))
	for i := range stream {
		chunks[i] = stream[i : i+1]
	}
	got := feedAll(chunks)
	if got.tokens != 1 || !got.done || got.usage.CachedTokens != 8 {
		t.Fatalf("byte by byte: %+v", got)
	}
}

func TestSSECases(t *testing.T) {
	cases := []struct {
		name, stream string
		tokens       int
		errored      bool
		cached       int64
		hasUsage     bool
	}{
		{"many events per chunk", "data: {\"choices\":[{}]}\n\ndata: {\"choices\":[{}]}\n\n", 1, false, 0, false},
		{"usage only is not a token", "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":0}}\n\n", 0, false, -1, true},
		{"null cached tokens", "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"prompt_tokens_details\":{\"cached_tokens\":null}}}\n\n", 0, false, -1, true},
		{"error event", "data: {\"error\":{\"message\":\"boom\",\"code\":500}}\n\n", 0, true, 0, false},
		{"multi-line data joined", "data: {\"choices\":\ndata: [{}]}\n\n", 1, false, 0, false},
		{"comments and event names ignored", ": ping\n\nevent: message\ndata: {\"choices\":[{}]}\n\n", 1, false, 0, false},
		{"incomplete event not parsed", "data: {\"choices\":[{}]}\n", 0, false, 0, false},
		{"malformed json ignored", "data: {nope\n\n", 0, false, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := feedAll([][]byte{[]byte(c.stream)})
			if got.tokens != c.tokens || got.errored != c.errored || got.hasUsage != c.hasUsage ||
				(c.hasUsage && got.usage.CachedTokens != c.cached) {
				t.Fatalf("got %+v", got)
			}
		})
	}
}

// TestSSETailCap: an event larger than MaxSSETail stops parsing (counted by the caller).
func TestSSETailCap(t *testing.T) {
	var p sseParser
	big := bytes.Repeat([]byte("x"), MaxSSETail/4)
	overflow := false
	p.Feed([]byte("data: "))
	for range 5 {
		overflow = overflow || p.Feed(big).Overflow
	}
	if !overflow || p.buf != nil {
		t.Fatalf("overflow=%v buffered=%d", overflow, len(p.buf))
	}
	if obs := p.Feed([]byte("\n\ndata: {\"choices\":[{}]}\n\n")); obs.FirstToken {
		t.Fatal("parsing continued after the cap")
	}
}

func TestParseJSONResponse(t *testing.T) {
	obs := parseJSONResponse(readFixture(t, "vllm_chat_response.json"))
	if !obs.FirstToken || !obs.HasUsage || obs.Usage.CachedTokens != -1 || obs.Usage.CompletionTokens != 2 {
		t.Fatalf("got %+v", obs)
	}
}

// FuzzSSE: any split of any input never panics, buffers at most MaxSSETail plus one chunk,
// and reports the same first-token/done outcome as feeding the input whole.
func FuzzSSE(f *testing.F) {
	f.Add(readFixture(f, "vllm_chat_stream_usage.sse"), uint16(7))
	f.Add([]byte("data: {\"error\":{}}\r\n\r\n"), uint16(1))
	f.Add([]byte("data: [DONE]\n\n"), uint16(3))
	f.Fuzz(func(t *testing.T, in []byte, cut uint16) {
		c := int(cut) % (len(in) + 1)
		whole := feedAll([][]byte{in})
		split := feedAll([][]byte{in[:c], in[c:]})
		if whole.tokens > 1 || split.tokens > 1 {
			t.Fatalf("first token reported %d/%d times", whole.tokens, split.tokens)
		}
		if len(in) < MaxSSETail && (whole.tokens != split.tokens || whole.done != split.done) {
			t.Fatalf("split at %d changed the outcome: whole %+v split %+v", c, whole, split)
		}
	})
}
