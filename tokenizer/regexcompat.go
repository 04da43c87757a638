package tokenizer

import (
	"strings"
	"unicode"
)

// propRange is a run of code points in one Unicode property (L, N, P, S or M).
type propRange struct {
	lo, hi rune
	prop   byte
}

// goPropTables are Go's tables for the properties regexp2 resolves with them.
var goPropTables = map[byte]*unicode.RangeTable{'L': unicode.L, 'N': unicode.N, 'P': unicode.P, 'S': unicode.S, 'M': unicode.M}

// propAdditions returns, as a regex character-class fragment of literal ranges,
// the code points Hugging Face's engine puts in \p{prop} that Go's table lacks
// (characters from newer Unicode versions); "" when there are none.
func propAdditions(prop byte) string {
	table := goPropTables[prop]
	var sb strings.Builder
	start, last := rune(-1), rune(-1)
	flush := func() {
		if start < 0 {
			return
		}
		sb.WriteRune(start)
		if last > start {
			sb.WriteByte('-')
			sb.WriteRune(last)
		}
	}
	for _, r := range hfPropRanges {
		if r.prop != prop {
			continue
		}
		for c := r.lo; c <= r.hi; c++ {
			if unicode.Is(table, c) {
				continue
			}
			if start >= 0 && c == last+1 {
				last = c
				continue
			}
			flush()
			start, last = c, c
		}
	}
	flush()
	return sb.String()
}

// widenUnicodeProps rewrites the \p{L}, \p{N}, \p{P}, \p{S} and \p{M} escapes of a
// regexp2 pattern so that they also match the characters Hugging Face's engine
// puts in them and Go's tables do not know yet. Negated \P{...} escapes and
// long property names are left alone.
func widenUnicodeProps(pattern string) string {
	memo := map[byte]string{}
	var sb strings.Builder
	inClass := false
	for i := 0; i < len(pattern); i++ {
		c := pattern[i]
		if c == '\\' && i+1 < len(pattern) {
			if pattern[i+1] == 'p' && i+4 < len(pattern) && pattern[i+2] == '{' && pattern[i+4] == '}' && goPropTables[pattern[i+3]] != nil {
				prop := pattern[i+3]
				add, ok := memo[prop]
				if !ok {
					add = propAdditions(prop)
					memo[prop] = add
				}
				switch {
				case add == "":
					sb.WriteString(pattern[i : i+5])
				case inClass:
					sb.WriteString(pattern[i:i+5] + add)
				default:
					sb.WriteString("[" + pattern[i:i+5] + add + "]")
				}
				i += 4
				continue
			}
			sb.WriteString(pattern[i : i+2])
			i++
			continue
		}
		switch {
		case c == '[' && !inClass:
			inClass = true
		case c == ']' && inClass:
			inClass = false
		}
		sb.WriteByte(c)
	}
	return sb.String()
}
