package tokenizer

import (
	"errors"
	"fmt"

	"github.com/condisagg/condisagg/internal/reqjson"
)

// ErrBatchPrompt is returned by EncodeCompletion for a prompt that holds several
// prompts (a list of strings or of token lists): vLLM runs those as separate
// sequences, which have no single token list to route on.
var ErrBatchPrompt = errors.New("prompt holds more than one sequence")

// EncodeCompletion appends to dst the prompt ids vLLM computes for a
// /v1/completions body, read as vLLM's server reads it (reqjson: exact keys, the
// last of repeated keys, pydantic's lax mode): a string prompt is encoded with
// add_special_tokens (default true, so Llama-3 gets its BOS); a token-id list is
// taken as is (ids written as floats with no fraction, or as numeric strings, are
// coerced as pydantic coerces them); a one-element list of either is unwrapped;
// truncate_prompt_tokens keeps the prompt's last N tokens (truncation_side "right":
// the first N).
func (t *Tokenizer) EncodeCompletion(dst []uint32, body []byte) ([]uint32, error) {
	obj, err := reqjson.Parse(body)
	if err != nil {
		return dst, fmt.Errorf("tokenizer: parse completion request: %w", err)
	}
	special := WithSpecialTokens
	if v, ok := obj.Get("add_special_tokens"); ok && !v.IsNull() {
		b, err := v.Bool()
		if err != nil {
			return dst, fmt.Errorf("tokenizer: completion request: add_special_tokens: %w", err)
		}
		special = SpecialTokens(b)
	}
	tr, err := readTruncation(obj.Get)
	if err != nil {
		return dst, err
	}
	pv, _ := obj.Get("prompt")
	if pv.IsNull() {
		return dst, fmt.Errorf("tokenizer: completion request: prompt missing")
	}
	p, err := reqjson.ReadPrompt(pv)
	if err != nil {
		return dst, fmt.Errorf("tokenizer: completion request: %w", err)
	}
	if p.Sequences > 1 {
		return dst, fmt.Errorf("tokenizer: completion request: %d prompts: %w", p.Sequences, ErrBatchPrompt)
	}
	if p.IsIDs {
		if len(p.IDs) == 0 {
			return dst, fmt.Errorf("tokenizer: completion request: prompt is an empty token list")
		}
		start := len(dst)
		return tr.cut(append(dst, p.IDs...), start), nil
	}
	return t.encodeTruncated(dst, p.Text, special, tr), nil
}
