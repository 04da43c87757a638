package tokenizer

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestBudget checks each limit of a bounded encode (budget.go) against the unbounded one.
func TestBudget(t *testing.T) {
	tk := loadModel(t, "qwen3", Options{CacheSegments: 64})
	text := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 40) // 361 ids
	full := tk.Encode(nil, text, WithoutSpecialTokens)
	closed := make(chan struct{})
	close(closed)
	mc := tk.MaxCharsPerToken()
	cases := []struct {
		name    string
		spec    string
		text    string
		lim     Limits
		wantErr error
		check   func(t *testing.T, err error)
	}{
		{name: "within_every_limit_is_the_unbounded_encode", spec: "vLLM renderers/params.py",
			text: text, lim: Limits{MaxInputTokens: len(full), MaxWordBytes: 64}},
		{name: "over_chars_is_refused_before_bpe_with_vllm_text", spec: "vLLM _text_len_check",
			text: strings.Repeat("x", 4*mc+1), lim: Limits{MaxInputTokens: 4}, wantErr: ErrPromptTooLong,
			check: func(t *testing.T, err error) {
				var le *LengthError
				if !errors.As(err, &le) || le.Param() != "input_text" || le.Chars != 4*mc+1 || le.CharLimit != 4*mc {
					t.Fatalf("err = %#v, want input_text with %d chars over %d", err, 4*mc+1, 4*mc)
				}
				if !strings.Contains(err.Error(), "your prompt contains 2") && !strings.Contains(err.Error(), "characters (more than") {
					t.Fatalf("message %q is not vLLM's", err)
				}
			}},
		{name: "over_tokens_stops_at_max_plus_one", spec: "vLLM _token_len_check",
			text: text, lim: Limits{MaxInputTokens: len(full) - 1}, wantErr: ErrPromptTooLong,
			check: func(t *testing.T, err error) {
				var le *LengthError
				if !errors.As(err, &le) || le.Param() != "input_tokens" || le.Tokens != len(full) {
					t.Fatalf("err = %#v, want input_tokens at least %d", err, len(full))
				}
			}},
		{name: "long_pretoken_is_not_encoded", spec: "issue 23 item 2",
			text: "hello " + strings.Repeat("a", 5000) + " world", lim: Limits{MaxWordBytes: 4096}, wantErr: ErrWordTooLong},
		{name: "closed_done_stops_encoding", spec: "issue 23 item 2",
			text: text, lim: Limits{Done: closed}, wantErr: ErrCancelled},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var b Budget
			b.Reset(c.lim)
			var cp Tokenizer
			got := tk.Bounded(&cp, &b).Encode(nil, c.text, WithoutSpecialTokens)
			if !errors.Is(b.Err(), c.wantErr) || (c.wantErr == nil) != (b.Err() == nil) {
				t.Fatalf("Err() = %v, want %v", b.Err(), c.wantErr)
			}
			if c.check != nil {
				c.check(t, b.Err())
			}
			if c.wantErr == nil && !slices.Equal(got, tk.Encode(nil, c.text, WithoutSpecialTokens)) {
				t.Fatal("bounded encode differs from the unbounded one")
			}
			// A cut-short encode leaves no entry behind: the text encodes as before.
			if !slices.Equal(tk.Encode(nil, c.text, WithoutSpecialTokens), tk.Encode(nil, c.text, WithoutSpecialTokens)) {
				t.Fatal("cache poisoned")
			}
		})
	}
}

// TestBudgetBoundsCPU: a fresh 4 MiB single word, seconds of BPE unbounded, is refused by the
// pre-token limit after a linear scan.
func TestBudgetBoundsCPU(t *testing.T) {
	tk := loadModel(t, "qwen3", Options{})
	word := make([]byte, 4<<20)
	for i := range word {
		word[i] = 'a' + byte((i*7+i/26)%26)
	}
	var b Budget
	b.Reset(Limits{MaxWordBytes: 4096})
	var cp Tokenizer
	start := time.Now()
	tk.Bounded(&cp, &b).Encode(nil, string(word), WithoutSpecialTokens)
	if !errors.Is(b.Err(), ErrWordTooLong) {
		t.Fatalf("Err() = %v, want ErrWordTooLong", b.Err())
	}
	t.Logf("4 MiB word refused in %s", time.Since(start))
}
