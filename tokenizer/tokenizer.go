package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"
)

// ErrUnsupported is wrapped by every load error caused by a tokenizer.json or
// tokenizer_config.json feature this package does not implement.
var ErrUnsupported = errors.New("feature not supported")

// ErrNoChatTemplate is returned by chat rendering when the model has no chat template.
var ErrNoChatTemplate = errors.New("model has no chat template")

// Tokenizer encodes text to token ids. It is immutable after load and safe for
// concurrent use; the optional segment cache has its own lock.
type Tokenizer struct {
	model      *bpe
	normalizer normalizer
	pre        preTokenizer
	positional bool          // pre-tokenization depends on whether a segment starts the input
	rawAdded   *addedMatcher // added tokens matched on raw text (normalized=false)
	normAdded  *addedMatcher // added tokens matched on normalized text
	prefix     []uint32      // TemplateProcessing "single" ids before the sequence
	suffix     []uint32      // ... and after it
	special    map[string]uint32
	chat       *chatTemplate
	cache      *segmentCache
	cfg        modelConfig
	scratch    *sync.Pool   // of *encodeScratch, shared by copies of the Tokenizer
	decoder    *decodeTable // id -> bytes for Decode, built on first use, shared by copies
	// maxCharsPerToken is the longest vocabulary entry in characters (budget.go).
	maxCharsPerToken int
	budget           *Budget // nil: unbounded; set only on a copy made by Bounded
}

// modelConfig is what tokenizer_config.json contributes.
type modelConfig struct {
	bosToken     string
	eosToken     string
	chatTemplate string
}

// newTokenizer builds a Tokenizer from the bytes of tokenizer.json.
func newTokenizer(data []byte) (*Tokenizer, error) {
	spec, err := parseSpec(data)
	if err != nil {
		return nil, err
	}
	t := &Tokenizer{
		special: make(map[string]uint32),
		scratch: &sync.Pool{New: func() any { return new(encodeScratch) }},
		decoder: &decodeTable{},
	}
	if t.normalizer, err = newNormalizer(spec.Normalizer); err != nil {
		return nil, err
	}
	var pre preTokenizerSpec
	if err := parsePreTokenizer(spec.PreTokenizer, &pre); err != nil {
		return nil, err
	}
	t.pre = seqPre(pre.steps)
	t.positional = pre.positional
	var ms modelSpec
	if err := json.Unmarshal(spec.Model, &ms); err != nil {
		return nil, fmt.Errorf("tokenizer: parse model: %w", err)
	}
	if t.model, err = newBPE(&ms, pre.byteLevel); err != nil {
		return nil, err
	}
	var raw, norm []addedToken
	for _, a := range spec.AddedTokens {
		at := addedToken{id: a.ID, content: a.Content, singleWord: a.SingleWord, lstrip: a.LStrip, rstrip: a.RStrip}
		// Normalized tokens are matched after the others, on normalized text,
		// even when there is no normalizer: the two passes decide overlaps.
		if a.Normalized {
			// Hugging Face matches the normalized form of the token's content.
			if t.normalizer != nil {
				at.content = t.normalizer.normalize(at.content)
			}
			norm = append(norm, at)
		} else {
			raw = append(raw, at)
		}
		t.special[a.Content] = a.ID
	}
	t.maxCharsPerToken = maxChars(ms.Vocab, spec.AddedTokens)
	t.rawAdded = newAddedMatcher(raw)
	t.normAdded = newAddedMatcher(norm)
	if err := t.parsePostProcessor(spec.PostProcessor); err != nil {
		return nil, err
	}
	return t, nil
}

func (t *Tokenizer) parsePostProcessor(raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	var c componentSpec
	if err := json.Unmarshal(raw, &c); err != nil {
		return fmt.Errorf("tokenizer: parse post_processor: %w", err)
	}
	switch c.Type {
	case "ByteLevel":
		// Only adjusts offsets; ids are unchanged.
		return nil
	case "Sequence":
		for _, p := range c.Processors {
			if err := t.parsePostProcessor(p); err != nil {
				return err
			}
		}
		return nil
	case "TemplateProcessing":
		return t.parseTemplate(&c)
	}
	return fmt.Errorf("tokenizer: post_processor %q: %w", c.Type, ErrUnsupported)
}

func (t *Tokenizer) parseTemplate(c *componentSpec) error {
	if len(t.prefix)+len(t.suffix) > 0 {
		return fmt.Errorf("tokenizer: more than one TemplateProcessing: %w", ErrUnsupported)
	}
	seen := false
	for _, p := range c.Single {
		switch {
		case p.Sequence != nil:
			if seen || p.Sequence.ID != "A" {
				return fmt.Errorf("tokenizer: TemplateProcessing single sequence %q: %w", p.Sequence.ID, ErrUnsupported)
			}
			seen = true
		case p.SpecialToken != nil:
			st, ok := c.SpecialTokens[p.SpecialToken.ID]
			if !ok {
				return fmt.Errorf("tokenizer: TemplateProcessing special token %q is not defined", p.SpecialToken.ID)
			}
			if seen {
				t.suffix = append(t.suffix, st.IDs...)
			} else {
				t.prefix = append(t.prefix, st.IDs...)
			}
		default:
			return fmt.Errorf("tokenizer: TemplateProcessing piece without SpecialToken or Sequence: %w", ErrUnsupported)
		}
	}
	if !seen {
		return fmt.Errorf("tokenizer: TemplateProcessing single template has no sequence A: %w", ErrUnsupported)
	}
	return nil
}

// SpecialTokens controls whether the post-processor's special tokens (BOS for
// Llama-3) are added around the encoded text.
type SpecialTokens bool

const (
	// WithSpecialTokens is add_special_tokens=True, the default of tokenizer.encode.
	WithSpecialTokens SpecialTokens = true
	// WithoutSpecialTokens is add_special_tokens=False, used after chat templates.
	WithoutSpecialTokens SpecialTokens = false
)

// Encode appends to dst the ids Hugging Face tokenizers produces for text.
// Invalid UTF-8 is first replaced by U+FFFD, as JSON decoding does.
func (t *Tokenizer) Encode(dst []uint32, text string, special SpecialTokens) []uint32 {
	if !utf8.ValidString(text) {
		text = strings.ToValidUTF8(text, "\uFFFD")
	}
	b := t.budget
	if b != nil {
		if !b.admitText(text, t.maxCharsPerToken) {
			return dst
		}
		b.base = len(dst)
	}
	if special {
		dst = append(dst, t.prefix...)
	}
	sc := t.scratch.Get().(*encodeScratch)
	dst = t.encodeText(dst, text, sc)
	sc.reset()
	t.scratch.Put(sc)
	if special {
		dst = append(dst, t.suffix...)
	}
	if b != nil {
		b.finish(len(dst) - b.base)
	}
	return dst
}

// encodeScratch holds the buffers of one encode call.
type encodeScratch struct {
	pieces []piece
	sub    []piece
	words  []string
	bpe    scratch
}

// maxPooledScratch bounds the buffers kept for reuse (in elements).
const maxPooledScratch = 1 << 14

// reset drops references to the input and oversized buffers before pooling.
func (sc *encodeScratch) reset() {
	if cap(sc.pieces) > maxPooledScratch || cap(sc.sub) > maxPooledScratch || cap(sc.words) > maxPooledScratch ||
		cap(sc.bpe.syms) > maxPooledScratch || cap(sc.bpe.heap) > maxPooledScratch {
		*sc = encodeScratch{}
		return
	}
	clear(sc.pieces[:cap(sc.pieces)])
	clear(sc.sub[:cap(sc.sub)])
	clear(sc.words[:cap(sc.words)])
	sc.pieces, sc.sub, sc.words = sc.pieces[:0], sc.sub[:0], sc.words[:0]
}

// encodeText splits text at raw added tokens and encodes each text segment.
func (t *Tokenizer) encodeText(dst []uint32, text string, sc *encodeScratch) []uint32 {
	sc.pieces = t.rawAdded.split(sc.pieces[:0], text)
	for i, p := range sc.pieces {
		if p.id >= 0 {
			dst = append(dst, uint32(p.id))
			continue
		}
		first := i == 0
		if t.cache != nil && !(first && t.positional) {
			dst = t.cache.encode(dst, p.text, t, sc)
			continue
		}
		dst = t.encodeSegment(dst, p.text, first, sc)
	}
	return dst
}

// encodeSegment encodes text that holds no raw added token: normalize, split at
// normalized added tokens, pre-tokenize, BPE. first reports that text starts the
// input.
func (t *Tokenizer) encodeSegment(dst []uint32, text string, first bool, sc *encodeScratch) []uint32 {
	if t.normalizer != nil {
		text = t.normalizer.normalize(text)
	}
	sc.sub = t.normAdded.split(sc.sub[:0], text)
	for j, p := range sc.sub {
		if p.id >= 0 {
			dst = append(dst, uint32(p.id))
			continue
		}
		sc.words = t.pre.split(sc.words[:0], p.text, first && j == 0)
		for _, w := range sc.words {
			if b := t.budget; b != nil && !b.admitWord(w, len(dst)-b.base) {
				return dst
			}
			dst = t.model.encodeWord(dst, w, &sc.bpe)
		}
	}
	return dst
}
