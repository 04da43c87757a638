package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// fileSpec is the subset of a Hugging Face tokenizer.json this package reads. Every
// other top-level key is checked by checkTopLevel so that a feature we do not
// implement is refused rather than ignored.
type fileSpec struct {
	Truncation    json.RawMessage `json:"truncation"`
	Padding       json.RawMessage `json:"padding"`
	AddedTokens   []addedSpec     `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	Model         json.RawMessage `json:"model"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
}

type addedSpec struct {
	ID         uint32 `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

type modelSpec struct {
	Type                    string            `json:"type"`
	Dropout                 *float64          `json:"dropout"`
	UnkToken                *string           `json:"unk_token"`
	ContinuingSubwordPrefix *string           `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string           `json:"end_of_word_suffix"`
	FuseUnk                 bool              `json:"fuse_unk"`
	ByteFallback            bool              `json:"byte_fallback"`
	IgnoreMerges            bool              `json:"ignore_merges"`
	Vocab                   map[string]uint32 `json:"vocab"`
	Merges                  json.RawMessage   `json:"merges"`
}

// componentSpec is one normalizer, pre-tokenizer or post-processor object. Only
// the fields of the component types we implement are read; typeName decides
// which of them are meaningful.
type componentSpec struct {
	Type string `json:"type"`

	// Sequence members.
	Normalizers   []json.RawMessage `json:"normalizers"`
	Pretokenizers []json.RawMessage `json:"pretokenizers"`
	Processors    []json.RawMessage `json:"processors"`

	// Split.
	Pattern  *patternSpec `json:"pattern"`
	Behavior string       `json:"behavior"`
	Invert   bool         `json:"invert"`

	// ByteLevel.
	AddPrefixSpace *bool `json:"add_prefix_space"`
	TrimOffsets    *bool `json:"trim_offsets"`
	UseRegex       *bool `json:"use_regex"`

	// Metaspace.
	Replacement    string `json:"replacement"`
	PrependScheme  string `json:"prepend_scheme"`
	Split          *bool  `json:"split"`
	StrReplacement string `json:"str_rep"`

	// Replace / Prepend normalizers.
	Content string `json:"content"`
	Prepend string `json:"prepend"`

	// TemplateProcessing.
	Single        []templatePiece                 `json:"single"`
	SpecialTokens map[string]templateSpecialToken `json:"special_tokens"`
}

type patternSpec struct {
	Regex  *string `json:"Regex"`
	String *string `json:"String"`
}

type templatePiece struct {
	SpecialToken *struct {
		ID string `json:"id"`
	} `json:"SpecialToken"`
	Sequence *struct {
		ID string `json:"id"`
	} `json:"Sequence"`
}

type templateSpecialToken struct {
	ID  string   `json:"id"`
	IDs []uint32 `json:"ids"`
}

// knownTopLevel lists the tokenizer.json keys we understand; any other key is refused.
var knownTopLevel = map[string]bool{
	"version": true, "truncation": true, "padding": true, "added_tokens": true,
	"normalizer": true, "pre_tokenizer": true, "model": true, "post_processor": true,
	"decoder": true,
}

func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || bytes.Equal(t, []byte("null"))
}

// parseSpec decodes tokenizer.json and refuses the top-level features this package does
// not implement.
func parseSpec(data []byte) (*fileSpec, error) {
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(data, &keys); err != nil {
		return nil, fmt.Errorf("tokenizer: parse tokenizer.json: %w", err)
	}
	for k := range keys {
		if !knownTopLevel[k] {
			return nil, fmt.Errorf("tokenizer: tokenizer.json key %q: %w", k, ErrUnsupported)
		}
	}
	spec := fileSpec{
		Truncation: keys["truncation"], Padding: keys["padding"], Normalizer: keys["normalizer"],
		PreTokenizer: keys["pre_tokenizer"], Model: keys["model"], PostProcessor: keys["post_processor"],
		Decoder: keys["decoder"],
	}
	if raw := keys["added_tokens"]; !isNull(raw) {
		if err := json.Unmarshal(raw, &spec.AddedTokens); err != nil {
			return nil, fmt.Errorf("tokenizer: parse added_tokens: %w", err)
		}
	}
	if !isNull(spec.Truncation) {
		return nil, fmt.Errorf("tokenizer: truncation is set: %w", ErrUnsupported)
	}
	if !isNull(spec.Padding) {
		return nil, fmt.Errorf("tokenizer: padding is set: %w", ErrUnsupported)
	}
	if isNull(spec.Model) {
		return nil, fmt.Errorf("tokenizer: tokenizer.json has no model")
	}
	return &spec, nil
}

// parseMerges accepts both merge encodings found in tokenizer.json files: "a b"
// strings (older files) and ["a", "b"] pairs (tokenizers >= 0.20).
func parseMerges(raw json.RawMessage) ([][2]string, error) {
	if isNull(raw) {
		return nil, nil
	}
	var pairs [][]string
	if err := json.Unmarshal(raw, &pairs); err == nil {
		out := make([][2]string, len(pairs))
		for i, p := range pairs {
			if len(p) != 2 {
				return nil, fmt.Errorf("tokenizer: merge %d %q: want a pair of strings", i, p)
			}
			out[i] = [2]string{p[0], p[1]}
		}
		return out, nil
	}
	var lines []string
	if err := json.Unmarshal(raw, &lines); err != nil {
		return nil, fmt.Errorf("tokenizer: parse merges: want a list of \"a b\" strings or of pairs: %w", err)
	}
	out := make([][2]string, len(lines))
	for i, s := range lines {
		a, b, ok := strings.Cut(s, " ")
		if !ok || strings.Contains(b, " ") {
			return nil, fmt.Errorf("tokenizer: merge %d %q: want two space-separated parts", i, s)
		}
		out[i] = [2]string{a, b}
	}
	return out, nil
}
