package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"

	"golang.org/x/text/unicode/norm"
)

// normalizer rewrites one piece of text before pre-tokenization.
type normalizer interface {
	normalize(s string) string
}

type unicodeNorm struct{ form norm.Form }

func (n unicodeNorm) normalize(s string) string {
	// ASCII is in every normal form; checking it a word at a time is several times faster than
	// IsNormalString's own byte loop, and prompts are mostly ASCII.
	if isASCII(s) || n.form.IsNormalString(s) {
		return s
	}
	return n.form.String(s)
}

// isASCII reports whether every byte of s is below 0x80, eight bytes per step (the compiler
// combines the eight loads into one).
func isASCII(s string) bool {
	for len(s) >= 8 {
		w := uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
			uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
		if w&0x8080808080808080 != 0 {
			return false
		}
		s = s[8:]
	}
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// prependNorm prepends a string to every non-empty piece, as the Prepend normalizer does.
type prependNorm struct{ prefix string }

func (n prependNorm) normalize(s string) string {
	if s == "" {
		return s
	}
	return n.prefix + s
}

// replaceNorm replaces every occurrence of a literal string.
type replaceNorm struct{ old, new string }

func (n replaceNorm) normalize(s string) string { return strings.ReplaceAll(s, n.old, n.new) }

type seqNorm []normalizer

func (n seqNorm) normalize(s string) string {
	for _, m := range n {
		s = m.normalize(s)
	}
	return s
}

// newNormalizer builds the normalizer of tokenizer.json; nil means none.
func newNormalizer(raw json.RawMessage) (normalizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	var c componentSpec
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("tokenizer: parse normalizer: %w", err)
	}
	switch c.Type {
	case "NFC":
		return unicodeNorm{norm.NFC}, nil
	case "NFD":
		return unicodeNorm{norm.NFD}, nil
	case "NFKC":
		return unicodeNorm{norm.NFKC}, nil
	case "NFKD":
		return unicodeNorm{norm.NFKD}, nil
	case "Prepend":
		return prependNorm{c.Prepend}, nil
	case "Replace":
		if c.Pattern == nil || c.Pattern.String == nil {
			return nil, fmt.Errorf("tokenizer: normalizer Replace with a regex pattern: %w", ErrUnsupported)
		}
		if *c.Pattern.String == "" {
			return nil, fmt.Errorf("tokenizer: normalizer Replace with an empty pattern: %w", ErrUnsupported)
		}
		return replaceNorm{*c.Pattern.String, c.Content}, nil
	case "Sequence":
		var seq seqNorm
		for _, r := range c.Normalizers {
			n, err := newNormalizer(r)
			if err != nil {
				return nil, err
			}
			if n != nil {
				seq = append(seq, n)
			}
		}
		return seq, nil
	}
	return nil, fmt.Errorf("tokenizer: normalizer %q: %w", c.Type, ErrUnsupported)
}
