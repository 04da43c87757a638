package tokenizer

import (
	"fmt"

	"github.com/condisagg/condisagg/internal/reqjson"
)

// truncation is a request's truncate_prompt_tokens and truncation_side, as vLLM 0.32's
// renderer applies them (vllm/renderers/params.py TokenizeParams).
type truncation struct {
	keep int    // tokens to keep; < 0: no truncation
	side string // "left" (keep the last tokens), "right" (the first), "" (the tokenizer's: left)
}

// readTruncation reads the two fields through get (the request's members). -1 asks vLLM for
// max_model_len - 1 tokens, a length the router does not know: it is read as no truncation,
// which differs only for prompts longer than the model's context.
func readTruncation(get func(string) (reqjson.Value, bool)) (truncation, error) {
	tr := truncation{keep: -1}
	if v, ok := get("truncate_prompt_tokens"); ok && !v.IsNull() {
		n, err := v.Int()
		if err != nil || n < -1 {
			return tr, fmt.Errorf("tokenizer: request: truncate_prompt_tokens %.40s: want an integer >= -1", v)
		}
		if n > int64(^uint32(0)) {
			n = int64(^uint32(0))
		}
		tr.keep = int(n)
	}
	if v, ok := get("truncation_side"); ok && !v.IsNull() {
		s, err := v.Str()
		if err != nil || (s != "left" && s != "right") {
			return tr, fmt.Errorf("tokenizer: request: truncation_side %.40s: want \"left\" or \"right\"", v)
		}
		tr.side = s
	}
	return tr, nil
}

// cut truncates the ids in dst[start:] (vLLM's _token_truncation: a slice of the token list).
func (tr truncation) cut(dst []uint32, start int) []uint32 {
	ids := dst[start:]
	if tr.keep < 0 || tr.keep >= len(ids) {
		return dst
	}
	if tr.side == "right" {
		return dst[:start+tr.keep]
	}
	n := copy(ids, ids[len(ids)-tr.keep:])
	return dst[:start+n]
}

// encodeTruncated encodes text with truncation. With no side named, vLLM hands the limit to
// the Hugging Face tokenizer (truncation=True, max_length=N, its truncation_side "left" for
// generating models), which keeps the special tokens and cuts the text's tokens from the left
// to fit; with a side named it encodes everything and slices the result.
func (t *Tokenizer) encodeTruncated(dst []uint32, text string, special SpecialTokens, tr truncation) []uint32 {
	start := len(dst)
	if tr.keep < 0 {
		return t.Encode(dst, text, special)
	}
	if tr.side != "" {
		return tr.cut(t.Encode(dst, text, special), start)
	}
	specials := 0
	if special {
		specials = len(t.prefix) + len(t.suffix)
		dst = append(dst, t.prefix...)
	}
	content := len(dst)
	dst = t.Encode(dst, text, WithoutSpecialTokens)
	if room := max(tr.keep-specials, 0); len(dst)-content > room {
		n := copy(dst[content:], dst[len(dst)-room:])
		dst = dst[:content+n]
	}
	if special {
		dst = append(dst, t.suffix...)
	}
	return dst
}
