package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
)

// ErrBatchPrompt is returned by EncodeCompletion for a prompt that holds several
// prompts (a list of strings or of token lists): vLLM runs those as separate
// sequences, which have no single token list to route on.
var ErrBatchPrompt = errors.New("prompt holds more than one sequence")

// completionRequest is the part of a /v1/completions body that decides its tokens.
type completionRequest struct {
	Prompt           json.RawMessage `json:"prompt"`
	AddSpecialTokens *bool           `json:"add_special_tokens"`
}

// EncodeCompletion appends to dst the prompt ids vLLM computes for a
// /v1/completions body: a string prompt is encoded with add_special_tokens
// (default true, so Llama-3 gets its BOS); a token-id list is taken as is; a
// one-element list of either is unwrapped.
func (t *Tokenizer) EncodeCompletion(dst []uint32, body []byte) ([]uint32, error) {
	var req completionRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return dst, fmt.Errorf("tokenizer: parse completion request: %w", err)
	}
	special := WithSpecialTokens
	if req.AddSpecialTokens != nil {
		special = SpecialTokens(*req.AddSpecialTokens)
	}
	return t.encodePrompt(dst, req.Prompt, special, 0)
}

func (t *Tokenizer) encodePrompt(dst []uint32, raw json.RawMessage, special SpecialTokens, depth int) ([]uint32, error) {
	if isNull(raw) {
		return dst, fmt.Errorf("tokenizer: completion request: prompt missing")
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return t.Encode(dst, s, special), nil
	}
	var ids []uint32
	if err := json.Unmarshal(raw, &ids); err == nil {
		if len(ids) == 0 {
			return dst, fmt.Errorf("tokenizer: completion request: prompt is an empty token list")
		}
		return append(dst, ids...), nil
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return dst, fmt.Errorf("tokenizer: completion request: prompt %.40s is neither a string nor token ids", raw)
	}
	if len(list) != 1 || depth > 0 {
		return dst, fmt.Errorf("tokenizer: completion request: %d prompts: %w", len(list), ErrBatchPrompt)
	}
	return t.encodePrompt(dst, list[0], special, depth+1)
}
