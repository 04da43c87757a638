package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// gpt2Pattern is the split regex the ByteLevel pre-tokenizer uses when use_regex is true.
const gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

// preTokenizer cuts normalized text into the words the model encodes one by one.
// split appends the words of s to dst; first reports that s starts at offset 0
// of the original input (only Metaspace's prepend_scheme "first" cares).
type preTokenizer interface {
	split(dst []string, s string, first bool) []string
}

// regexSplit is the Split pre-tokenizer with behavior Isolated: matches and the
// gaps between them each become a word.
type regexSplit struct {
	re      *regexp2.Regexp
	pattern string
}

// newRegexSplit compiles pattern for regexp2, with its Unicode properties
// widened to Hugging Face's (see widenUnicodeProps).
func newRegexSplit(pattern string) (*regexSplit, error) {
	re, err := regexp2.Compile(widenUnicodeProps(pattern), regexp2.None)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: compile split pattern %q: %w", pattern, err)
	}
	return &regexSplit{re: re, pattern: pattern}, nil
}

func (p *regexSplit) split(dst []string, s string, _ bool) []string {
	if s == "" {
		return dst
	}
	runes := []rune(s)
	// byteAt[i] is the byte offset of runes[i]; byteAt[len(runes)] = len(s).
	byteAt := make([]int, len(runes)+1)
	off := 0
	for i, r := range runes {
		byteAt[i] = off
		n := utf8.RuneLen(r)
		if n < 0 {
			n = 1
		}
		off += n
	}
	byteAt[len(runes)] = off
	if off != len(s) {
		// s held invalid UTF-8: fall back to the sanitized text's own offsets.
		s = string(runes)
	}
	last := 0
	m, err := p.re.FindRunesMatch(runes)
	for err == nil && m != nil {
		start, end := byteAt[m.Index], byteAt[m.Index+m.Length]
		if end > start {
			if start > last {
				dst = append(dst, s[last:start])
			}
			dst = append(dst, s[start:end])
			last = end
		}
		m, err = p.re.FindNextMatch(m)
	}
	if last < len(s) {
		dst = append(dst, s[last:])
	}
	return dst
}

// literalSplit is the Split pre-tokenizer with a String pattern, behavior Isolated.
type literalSplit struct{ sep string }

func (p literalSplit) split(dst []string, s string, _ bool) []string {
	for s != "" {
		i := strings.Index(s, p.sep)
		if i < 0 {
			break
		}
		if i > 0 {
			dst = append(dst, s[:i])
		}
		dst = append(dst, s[i:i+len(p.sep)])
		s = s[i+len(p.sep):]
	}
	if s != "" {
		dst = append(dst, s)
	}
	return dst
}

// prefixSpace is ByteLevel's add_prefix_space: a space before every word that
// does not start with one.
type prefixSpace struct{}

func (prefixSpace) split(dst []string, s string, _ bool) []string {
	if s == "" {
		return dst
	}
	if s[0] != ' ' {
		s = " " + s
	}
	return append(dst, s)
}

// seqPre runs pre-tokenizers one after the other on every word.
type seqPre []preTokenizer

func (p seqPre) split(dst []string, s string, first bool) []string {
	switch len(p) {
	case 0:
		if s != "" {
			dst = append(dst, s)
		}
		return dst
	case 1:
		return p[0].split(dst, s, first)
	}
	words := p[0].split(nil, s, first)
	for _, next := range p[1:] {
		var out []string
		for i, w := range words {
			out = next.split(out, w, first && i == 0)
		}
		words = out
	}
	return append(dst, words...)
}

// metaspace is the Metaspace pre-tokenizer: spaces become the replacement
// character, which is prepended per prepend_scheme, and with split the text is
// cut before every replacement character.
type metaspace struct {
	replacement string
	prepend     string // "always", "first" or "never"
	splitWords  bool
}

func (m metaspace) split(dst []string, s string, first bool) []string {
	if s == "" {
		return dst
	}
	s = strings.ReplaceAll(s, " ", m.replacement)
	if !strings.HasPrefix(s, m.replacement) && (m.prepend == "always" || (m.prepend == "first" && first)) {
		s = m.replacement + s
	}
	if !m.splitWords {
		return append(dst, s)
	}
	for {
		i := strings.Index(s[1:], m.replacement)
		if i < 0 {
			return append(dst, s)
		}
		dst = append(dst, s[:i+1])
		s = s[i+1:]
	}
}

// preTokenizerSpec is the decoded pre-tokenizer chain. byteLevel reports whether
// the chain ends with the ByteLevel byte mapping.
type preTokenizerSpec struct {
	steps      []preTokenizer
	byteLevel  bool
	positional bool // a step depends on the piece's offset (Metaspace "first")
}

// addRegexStep appends an Isolated split on pattern: the hand-written scanner
// when the pattern is one it knows, regexp2 otherwise. The pattern is always
// compiled so that a bad one is refused at load either way.
func addRegexStep(pattern string, out *preTokenizerSpec) error {
	re, err := newRegexSplit(pattern)
	if err != nil {
		return err
	}
	if sc := newScanner(pattern); sc != nil {
		out.steps = append(out.steps, sc)
		return nil
	}
	out.steps = append(out.steps, re)
	return nil
}

func parsePreTokenizer(raw json.RawMessage, out *preTokenizerSpec) error {
	if isNull(raw) {
		return nil
	}
	if out.byteLevel {
		return fmt.Errorf("tokenizer: pre-tokenizer after ByteLevel: %w", ErrUnsupported)
	}
	var c componentSpec
	if err := json.Unmarshal(raw, &c); err != nil {
		return fmt.Errorf("tokenizer: parse pre_tokenizer: %w", err)
	}
	switch c.Type {
	case "Sequence":
		for _, r := range c.Pretokenizers {
			if err := parsePreTokenizer(r, out); err != nil {
				return err
			}
		}
		return nil
	case "Split":
		return parseSplit(&c, out)
	case "Metaspace":
		return parseMetaspace(&c, out)
	case "ByteLevel":
		if c.AddPrefixSpace != nil && *c.AddPrefixSpace {
			out.steps = append(out.steps, prefixSpace{})
		}
		if c.UseRegex == nil || *c.UseRegex {
			if err := addRegexStep(gpt2Pattern, out); err != nil {
				return err
			}
		}
		out.byteLevel = true
		return nil
	}
	return fmt.Errorf("tokenizer: pre_tokenizer %q: %w", c.Type, ErrUnsupported)
}

func parseSplit(c *componentSpec, out *preTokenizerSpec) error {
	if c.Behavior != "Isolated" {
		return fmt.Errorf("tokenizer: Split behavior %q: %w", c.Behavior, ErrUnsupported)
	}
	if c.Invert {
		return fmt.Errorf("tokenizer: Split invert=true: %w", ErrUnsupported)
	}
	switch {
	case c.Pattern == nil:
		return fmt.Errorf("tokenizer: Split without a pattern")
	case c.Pattern.Regex != nil:
		if err := addRegexStep(*c.Pattern.Regex, out); err != nil {
			return err
		}
	case c.Pattern.String != nil && *c.Pattern.String != "":
		out.steps = append(out.steps, literalSplit{*c.Pattern.String})
	default:
		return fmt.Errorf("tokenizer: Split with an empty pattern: %w", ErrUnsupported)
	}
	return nil
}

func parseMetaspace(c *componentSpec, out *preTokenizerSpec) error {
	if utf8.RuneCountInString(c.Replacement) != 1 {
		return fmt.Errorf("tokenizer: Metaspace replacement %q: want one character: %w", c.Replacement, ErrUnsupported)
	}
	scheme := c.PrependScheme
	if scheme == "" {
		// Files from before prepend_scheme carry add_prefix_space instead.
		scheme = "never"
		if c.AddPrefixSpace == nil || *c.AddPrefixSpace {
			scheme = "always"
		}
	}
	switch scheme {
	case "always", "never":
	case "first":
		out.positional = true
	default:
		return fmt.Errorf("tokenizer: Metaspace prepend_scheme %q: %w", scheme, ErrUnsupported)
	}
	out.steps = append(out.steps, metaspace{replacement: c.Replacement, prepend: scheme, splitWords: c.Split == nil || *c.Split})
	return nil
}
