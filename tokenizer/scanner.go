package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// The split patterns the scanner replaces, byte for byte as they appear in
// tokenizer.json. Any other pattern runs on regexp2.
const (
	// qwen2Pattern: Qwen2/Qwen2.5/Qwen3 (single digits).
	qwen2Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// llama3Pattern: Llama-3.x, DeepSeek-V3 style (digit groups of up to three).
	llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// scanner is a hand-written equivalent of one of the known split regexes. It
// reproduces the backtracking engine's choice at every position: the first
// alternative that matches wins, each with its greedy length. Character classes
// come from hfClassRanges, measured on Hugging Face's own regex engine, so
// characters Go's unicode tables do not know yet (Unicode 16) split as they do
// there; on every other character they equal regexp2's (Go's tables).
type scanner struct {
	gpt2     bool // GPT-2 pattern: case-sensitive contractions, " ?" prefixes
	maxDigit int  // longest digit run per match; 0 = unbounded
}

// newScanner returns the scanner for pattern, or nil when there is none.
func newScanner(pattern string) *scanner {
	switch pattern {
	case qwen2Pattern:
		return &scanner{maxDigit: 1}
	case llama3Pattern:
		return &scanner{maxDigit: 3}
	case gpt2Pattern:
		return &scanner{gpt2: true}
	}
	return nil
}

// Character classes.
const (
	clsOther   = iota // not \s, \p{L} or \p{N}
	clsLetter         // \p{L}
	clsNumber         // \p{N}
	clsSpace          // \s other than \r and \n
	clsNewline        // \r or \n
)

// asciiClass is the class of every ASCII byte.
var asciiClass = func() [128]uint8 {
	var t [128]uint8
	for b := range 128 {
		t[b] = goClassOfRune(rune(b))
	}
	return t
}()

// classRange is a run of code points of one class.
type classRange struct {
	lo, hi rune
	cls    uint8
}

// classOfRune is the scanner's class of r: Go's rules for ASCII, Hugging Face's
// measured table above it.
func classOfRune(r rune) uint8 {
	if r < utf8.RuneSelf {
		return goClassOfRune(r)
	}
	lo, hi := 0, len(hfClassRanges)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		switch {
		case r < hfClassRanges[m].lo:
			hi = m
		case r > hfClassRanges[m].hi:
			lo = m + 1
		default:
			return hfClassRanges[m].cls
		}
	}
	return clsOther
}

// goClassOfRune is the class regexp2 sees, from Go's unicode tables.
func goClassOfRune(r rune) uint8 {
	switch {
	case r == '\r' || r == '\n':
		return clsNewline
	case unicode.IsLetter(r):
		return clsLetter
	case unicode.IsNumber(r):
		return clsNumber
	case unicode.IsSpace(r):
		return clsSpace
	}
	return clsOther
}

// at returns the class and byte width of the character at s[i]; i < len(s).
func at(s string, i int) (uint8, int) {
	if b := s[i]; b < utf8.RuneSelf {
		return asciiClass[b], 1
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	return classOfRune(r), n
}

// classAt is at with cls=255 past the end.
func classAt(s string, i int) (uint8, int) {
	if i >= len(s) {
		return 255, 0
	}
	return at(s, i)
}

func isSpaceCls(c uint8) bool { return c == clsSpace || c == clsNewline }

// run returns the end of the run of characters starting at i whose class is
// want, stopping after max characters when max > 0. ASCII is classified in the
// loop itself: prompts are mostly ASCII, and this loop is most of pretokenization.
func run(s string, i int, want uint8, max int) int {
	for n := 1; i < len(s); n++ {
		c, w := asciiClass[s[i]&0x7f], 1
		if s[i] >= utf8.RuneSelf {
			c, w = at(s, i)
		}
		if c != want {
			break
		}
		i += w
		if n == max {
			break
		}
	}
	return i
}

func (sc *scanner) split(dst []string, s string, _ bool) []string {
	for i := 0; i < len(s); {
		end := sc.next(s, i)
		dst = append(dst, s[i:end])
		i = end
	}
	return dst
}

// contraction returns the length of a contraction ('s 't 're 've 'm 'll 'd) at
// s[i:], 0 if none. foldCase makes the letters case-insensitive.
func contraction(s string, i int, foldCase bool) int {
	if s[i] != '\'' || i+1 >= len(s) {
		return 0
	}
	lower := func(b byte) byte {
		if foldCase && b >= 'A' && b <= 'Z' {
			return b + 'a' - 'A'
		}
		return b
	}
	switch lower(s[i+1]) {
	case 's', 't', 'm', 'd':
		return 2
	case 'r', 'v':
		if i+2 < len(s) && lower(s[i+2]) == 'e' {
			return 3
		}
	case 'l':
		if i+2 < len(s) && lower(s[i+2]) == 'l' {
			return 3
		}
	}
	return 0
}

// next returns the end of the match starting at i.
func (sc *scanner) next(s string, i int) int {
	if sc.gpt2 {
		return sc.nextGPT2(s, i)
	}
	if n := contraction(s, i, true); n > 0 {
		return i + n
	}
	c, w := at(s, i)
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if c == clsLetter {
		return run(s, i+w, clsLetter, 0)
	}
	if c == clsOther || c == clsSpace {
		if c2, _ := classAt(s, i+w); c2 == clsLetter {
			return run(s, i+w, clsLetter, 0)
		}
	}
	// \p{N}{1,max}
	if c == clsNumber {
		return run(s, i, clsNumber, sc.maxDigit)
	}
	// " ?[^\s\p{L}\p{N}]+[\r\n]*"
	start := i
	if s[i] == ' ' {
		if c2, _ := classAt(s, i+1); c2 == clsOther {
			start = i + 1
		}
	}
	if c0, _ := at(s, start); c0 == clsOther {
		end := run(s, start, clsOther, 0)
		return run(s, end, clsNewline, 0)
	}
	// Whitespace alternatives: c is clsSpace or clsNewline here.
	return spaceMatch(s, i, true)
}

// spaceMatch resolves \s*[\r\n]+ (when withNewline), then \s+(?!\S), then \s+ at
// the whitespace character s[i].
func spaceMatch(s string, i int, withNewline bool) int {
	runEnd := i
	lastNL := -1 // end of the last \r or \n in the run
	chars := 0
	lastStart := i
	for runEnd < len(s) {
		c, w := at(s, runEnd)
		if !isSpaceCls(c) {
			break
		}
		lastStart = runEnd
		runEnd += w
		chars++
		if c == clsNewline {
			lastNL = runEnd
		}
	}
	if withNewline && lastNL > 0 {
		return lastNL
	}
	if runEnd == len(s) {
		return runEnd
	}
	if chars >= 2 {
		return lastStart
	}
	return runEnd
}

// nextGPT2 is next for the GPT-2 pattern.
func (sc *scanner) nextGPT2(s string, i int) int {
	if n := contraction(s, i, false); n > 0 {
		return i + n
	}
	start := i
	if s[i] == ' ' && i+1 < len(s) {
		start = i + 1
	}
	c, _ := classAt(s, start)
	switch {
	case c == clsLetter:
		return run(s, start, clsLetter, 0)
	case c == clsNumber:
		return run(s, start, clsNumber, 0)
	case c == clsOther:
		return run(s, start, clsOther, 0)
	}
	return spaceMatch(s, i, false)
}
