package engine

import (
	"strings"
	"testing"
	"time"
)

const streamTwo = `data: {"id":"cmpl-1","object":"text_completion","choices":[{"text":" a","finish_reason":null}]}

data: {"id":"cmpl-1","object":"text_completion","choices":[{"text":" b","finish_reason":"length"}]}

data: {"id":"cmpl-1","object":"text_completion","choices":[],"usage":{"prompt_tokens":64,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":48}}}

data: [DONE]

`

// TestReadStream: one time per token event, the usage's cached tokens, and each malformed
// stream refused with its reason.
func TestReadStream(t *testing.T) {
	s, err := readStream(strings.NewReader(streamTwo), time.Now(), 2, nil)
	if err != nil || len(s.times) != 2 || s.cached != 48 {
		t.Fatalf("%+v, %v", s, err)
	}
	for _, tc := range []struct {
		name, text string
		want       int
		err        string
	}{
		{"merged_tokens", strings.Replace(streamTwo, `"completion_tokens":2`, `"completion_tokens":3`, 1), 3, "3 tokens in 2 events"},
		{"short", streamTwo, 5, "streamed 2 tokens, asked for 5"},
		{"empty", "data: [DONE]\n\n", 1, "without a token"},
		{"error_event", `data: {"error":{"message":"Internal server error","code":500}}` + "\n\n", 1, "failed the request: Internal server error"},
		{"bad_json", "data: {\"choices\":\n\n", 1, "stream event"},
		{"line_too_long", "data: " + strings.Repeat("x", maxLineBytes+1) + "\n", 1, "reading the stream"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := readStream(strings.NewReader(tc.text), time.Now(), tc.want, nil)
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("err = %v, want %q", err, tc.err)
			}
		})
	}
}

func FuzzReadStream(f *testing.F) {
	f.Add([]byte(streamTwo), 2)
	f.Add([]byte("data: [DONE]\n\n"), 1)
	f.Fuzz(func(t *testing.T, data []byte, want int) {
		s, err := readStream(strings.NewReader(string(data)), time.Now(), want, nil)
		if err != nil {
			return
		}
		if len(s.times) != want || len(s.times) > strings.Count(string(data), "data:") {
			t.Fatalf("%d times for want %d", len(s.times), want)
		}
	})
}
