package tokenizer

import "strings"

// splitConcat splits the expression of an output tag that is a chain of string
// concatenations starting with a string literal ('<|im_start|>' + message.role
// + '\n' + message.content) into its operands. Printing the operands one after
// the other prints what the chain prints, without building the concatenated
// string: the template engine copies the whole left side at every +, so a long
// message would be copied once per operand that follows it.
//
// It reports false, and the tag stays as written, unless the expression is
// plainly such a chain: the first operand is one quoted literal, and no
// operator or keyword other than + appears outside quotes and brackets (so no
// operator precedence or filter binding can differ from the original).
func splitConcat(expr string) ([]string, bool) {
	var ops []string
	depth, start := 0, 0
	for i := 0; i < len(expr); i++ {
		c := expr[i]
		switch {
		case c == '\'' || c == '"':
			end := closingQuote(expr, i)
			if end < 0 {
				return nil, false
			}
			i = end
		case c == '(' || c == '[' || c == '{':
			depth++
		case c == ')' || c == ']' || c == '}':
			depth--
			if depth < 0 {
				return nil, false
			}
		case depth > 0:
		case c == '+':
			ops = append(ops, expr[start:i])
			start = i + 1
		case strings.IndexByte("-~*/%<>=!|,?:", c) >= 0:
			return nil, false
		case isWordStart(c):
			j := i
			for j < len(expr) && isWordByte(expr[j]) {
				j++
			}
			switch expr[i:j] {
			case "and", "or", "not", "if", "else", "in", "is":
				return nil, false
			}
			i = j - 1
		}
	}
	if depth != 0 || len(ops) == 0 {
		return nil, false
	}
	ops = append(ops, expr[start:])
	for i, op := range ops {
		op = strings.TrimSpace(op)
		if op == "" {
			return nil, false
		}
		ops[i] = op
	}
	if first := ops[0]; (first[0] != '\'' && first[0] != '"') || closingQuote(first, 0) != len(first)-1 {
		return nil, false
	}
	return ops, true
}

// closingQuote returns the index of the quote that closes the string literal
// opening at s[open], or -1.
func closingQuote(s string, open int) int {
	q := s[open]
	for i := open + 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case q:
			return i
		}
	}
	return -1
}

func isWordStart(c byte) bool {
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

func isWordByte(c byte) bool {
	return isWordStart(c) || (c >= '0' && c <= '9') || c == '.'
}
