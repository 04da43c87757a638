package tokenizer

import (
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// addedToken is one entry of tokenizer.json's added_tokens.
type addedToken struct {
	id         uint32
	content    string
	singleWord bool
	lstrip     bool
	rstrip     bool
}

// addedMatcher finds added tokens in text with leftmost-longest semantics, the
// match kind Hugging Face configures its Aho-Corasick automaton with.
type addedMatcher struct {
	toks    []addedToken
	byFirst [256][]int32 // candidates by first byte, longest first
	// onlyFirst is the first byte of every token when they all share one
	// (e.g. '<'), so the scan can jump with IndexByte; -1 otherwise.
	onlyFirst int
}

func newAddedMatcher(toks []addedToken) *addedMatcher {
	m := &addedMatcher{}
	for _, t := range toks {
		if t.content == "" {
			continue
		}
		m.toks = append(m.toks, t)
	}
	for i, t := range m.toks {
		b := t.content[0]
		m.byFirst[b] = append(m.byFirst[b], int32(i))
	}
	m.onlyFirst = -1
	for b := range m.byFirst {
		c := m.byFirst[b]
		sort.SliceStable(c, func(x, y int) bool { return len(m.toks[c[x]].content) > len(m.toks[c[y]].content) })
		if len(c) > 0 {
			if m.onlyFirst == -1 {
				m.onlyFirst = b
			} else {
				m.onlyFirst = -2
			}
		}
	}
	if m.onlyFirst < 0 {
		m.onlyFirst = -1
	}
	return m
}

func (m *addedMatcher) empty() bool { return m == nil || len(m.toks) == 0 }

// next returns the leftmost-longest match at or after from.
func (m *addedMatcher) next(s string, from int) (start, end int, tok *addedToken, ok bool) {
	for i := from; i < len(s); i++ {
		if m.onlyFirst >= 0 {
			j := strings.IndexByte(s[i:], byte(m.onlyFirst))
			if j < 0 {
				break
			}
			i += j
		}
		cands := m.byFirst[s[i]]
		if len(cands) == 0 {
			continue
		}
		rest := s[i:]
		for _, ci := range cands {
			c := m.toks[ci].content
			if len(rest) >= len(c) && rest[:len(c)] == c {
				return i, i + len(c), &m.toks[ci], true
			}
		}
	}
	return 0, 0, nil, false
}

// piece is a part of the input: either text to tokenize (id < 0) or an added token.
type piece struct {
	text string
	id   int64
}

// split cuts s at added tokens and appends the parts to dst, applying the
// single_word, lstrip and rstrip rules exactly as Hugging Face's find_matches
// does. Empty text parts are dropped.
func (m *addedMatcher) split(dst []piece, s string) []piece {
	if m.empty() {
		if s != "" {
			dst = append(dst, piece{text: s, id: -1})
		}
		return dst
	}
	startOffset := 0
	pos := 0
	for pos < len(s) {
		start, stop, tok, ok := m.next(s, pos)
		if !ok {
			break
		}
		pos = stop
		if tok.singleWord {
			startSpace := start == 0 || !endsWithWord(s[:start])
			stopSpace := stop == len(s) || !startsWithWord(s[stop:])
			if !startSpace || !stopSpace {
				continue
			}
		}
		if tok.lstrip {
			start = max(spaceLeftmostAtEnd(s[:start]), startOffset)
		}
		if tok.rstrip {
			stop += spaceRightmostAtStart(s[stop:])
		}
		if startOffset < start {
			dst = append(dst, piece{text: s[startOffset:start], id: -1})
		}
		dst = append(dst, piece{id: int64(tok.id)})
		startOffset = stop
	}
	if startOffset < len(s) {
		dst = append(dst, piece{text: s[startOffset:], id: -1})
	}
	return dst
}

func isWordRune(r rune) bool {
	return r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r)
}

func endsWithWord(s string) bool {
	r, _ := utf8.DecodeLastRuneInString(s)
	return isWordRune(r)
}

func startsWithWord(s string) bool {
	r, _ := utf8.DecodeRuneInString(s)
	return isWordRune(r)
}

// spaceLeftmostAtEnd returns the offset where the trailing whitespace of s begins.
func spaceLeftmostAtEnd(s string) int {
	i := len(s)
	for i > 0 {
		r, size := utf8.DecodeLastRuneInString(s[:i])
		if !unicode.IsSpace(r) {
			break
		}
		i -= size
	}
	return i
}

// spaceRightmostAtStart returns the length of the leading whitespace of s.
func spaceRightmostAtStart(s string) int {
	i := 0
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		if !unicode.IsSpace(r) {
			break
		}
		i += size
	}
	return i
}
