package tokenizer

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// ErrPromptTooLong is wrapped by the refusal of a prompt longer than Limits.MaxInputTokens:
// the request vLLM itself would refuse with 400 (*LengthError carries its numbers).
var ErrPromptTooLong = errors.New("prompt longer than the model's context")

// ErrWordTooLong: a pre-token is longer than Limits.MaxWordBytes; the prompt was not encoded.
var ErrWordTooLong = errors.New("pre-token longer than the limit")

// ErrCancelled: Limits.Done closed during encoding (the client went away).
var ErrCancelled = errors.New("encoding cancelled")

// Limits bound the CPU one encode call may take. The zero value bounds nothing.
type Limits struct {
	// MaxInputTokens is the model's max_model_len (0: unknown). As vLLM 0.32 does
	// (renderers/params.py), a prompt of more characters than MaxInputTokens times the
	// longest vocabulary entry is refused before any BPE, and encoding stops once it has
	// produced MaxInputTokens+1 ids.
	MaxInputTokens int
	// MaxWordBytes bounds one pre-token (0: none): BPE of a word costs about its length
	// times its log, with no cache to help a fresh one, so a megabyte word is seconds of CPU.
	MaxWordBytes int
	// Done stops encoding at the next check once closed (a request context's Done).
	Done <-chan struct{}
}

// LengthError is vLLM's refusal of a prompt over max_model_len: Param is "input_text" (the
// character bound) or "input_tokens", Value the characters or tokens counted.
type LengthError struct {
	MaxTokens int // max_model_len
	Chars     int // input_text: the prompt's characters
	CharLimit int // input_text: MaxTokens times the longest vocabulary entry
	Tokens    int // input_tokens: ids produced before encoding stopped (MaxTokens+1)
}

// Error is vLLM 0.32's message, the str() of its VLLMValidationError with the parameter.
func (e *LengthError) Error() string {
	if e.Tokens > 0 {
		return fmt.Sprintf("This model's maximum context length is %d tokens. However, your prompt contains at least %d input tokens, "+
			"which exceeds this limit even without any output tokens. Please reduce the length of the input prompt. (parameter=input_tokens, value=%d)",
			e.MaxTokens, e.Tokens, e.Tokens)
	}
	return fmt.Sprintf("This model's maximum context length is %d tokens. However, your prompt contains %d characters (more than %d characters, "+
		"which is the upper bound for %d input tokens). Please reduce the length of the input prompt. (parameter=input_text, value=%d)",
		e.MaxTokens, e.Chars, e.CharLimit, e.MaxTokens, e.Chars)
}

// Param is the request field vLLM names.
func (e *LengthError) Param() string {
	if e.Tokens > 0 {
		return "input_tokens"
	}
	return "input_text"
}

// Is makes errors.Is(err, ErrPromptTooLong) true.
func (e *LengthError) Is(target error) bool { return target == ErrPromptTooLong }

// Budget is the state of one bounded encode: a Tokenizer made by Bounded checks it between
// words. Not safe for concurrent use; one request owns it.
type Budget struct {
	Limits
	words int   // words seen, for the periodic Done check
	base  int   // len(dst) when Encode began: ids before it are not this prompt's
	err   error // the first limit hit; encoding has stopped
}

// Reset makes b a fresh budget under l.
func (b *Budget) Reset(l Limits) { *b = Budget{Limits: l} }

// Err is why encoding stopped (nil: it finished).
func (b *Budget) Err() error { return b.err }

// Bounded makes dst a copy of t whose encodes run under b, and returns it: the copy shares
// every table and cache with t (no allocation), and its results are only valid when b.Err()
// is nil afterwards.
func (t *Tokenizer) Bounded(dst *Tokenizer, b *Budget) *Tokenizer {
	*dst = *t
	dst.budget = b
	return dst
}

// MaxCharsPerToken is the longest vocabulary entry in characters (vLLM's
// max_chars_per_token: added tokens included).
func (t *Tokenizer) MaxCharsPerToken() int { return t.maxCharsPerToken }

// doneEvery is how many words pass between two checks of Done: a check is a channel
// select, cheap but not free on a path that costs ~20 ns a cached word.
const doneEvery = 256

// cancelled checks Done.
func (b *Budget) cancelled() bool {
	if b.Done == nil {
		return false
	}
	select {
	case <-b.Done:
		b.err = ErrCancelled
		return true
	default:
		return false
	}
}

// admitText applies vLLM's character check to the whole prompt before anything is encoded.
func (b *Budget) admitText(text string, maxChars int) bool {
	if b.err != nil || b.cancelled() {
		return false
	}
	if b.MaxInputTokens <= 0 || maxChars <= 0 {
		return true
	}
	limit := b.MaxInputTokens * maxChars
	if len(text) <= limit { // a character is at least one byte
		return true
	}
	if n := utf8.RuneCountInString(text); n > limit {
		b.err = &LengthError{MaxTokens: b.MaxInputTokens, Chars: n, CharLimit: limit}
		return false
	}
	return true
}

// admitWord is checked before each pre-token's BPE, with produced the ids appended so far.
func (b *Budget) admitWord(word string, produced int) bool {
	if b.err != nil {
		return false
	}
	if b.MaxInputTokens > 0 && produced > b.MaxInputTokens {
		// vLLM encodes with truncation to max_model_len+1 and reports "at least" that.
		b.err = &LengthError{MaxTokens: b.MaxInputTokens, Tokens: b.MaxInputTokens + 1}
		return false
	}
	if b.MaxWordBytes > 0 && len(word) > b.MaxWordBytes {
		b.err = fmt.Errorf("%w: a pre-token of %d bytes is over %d (max_pretoken_bytes)", ErrWordTooLong, len(word), b.MaxWordBytes)
		return false
	}
	b.words++
	if b.words%doneEvery == 0 || len(word) > doneEvery {
		return !b.cancelled()
	}
	return true
}

// finish applies the token check to the finished encode.
func (b *Budget) finish(produced int) {
	if b.err == nil && b.MaxInputTokens > 0 && produced > b.MaxInputTokens {
		b.err = &LengthError{MaxTokens: b.MaxInputTokens, Tokens: b.MaxInputTokens + 1}
	}
}

// maxChars is vLLM's max_chars_per_token: max(len(tok) for tok in tokenizer.get_vocab()),
// the vocabulary and the added tokens, in characters.
func maxChars(vocab map[string]uint32, added []addedSpec) int {
	n := 0
	for tok := range vocab {
		n = max(n, utf8.RuneCountInString(tok))
	}
	for _, a := range added {
		n = max(n, utf8.RuneCountInString(a.Content))
	}
	return n
}
