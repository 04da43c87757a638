package tokenizer

import (
	"slices"
	"testing"
)

// TestSplitConcat checks which output expressions are printed operand by operand.
func TestSplitConcat(t *testing.T) {
	cases := []struct {
		name, spec, expr string
		want             []string // nil: not split
	}{
		{"literal_first_chain_splits", "Qwen3 user turn", `'<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n'`,
			[]string{`'<|im_start|>'`, `message.role`, `'\n'`, `message.content`, `'<|im_end|>'`, `'\n'`}},
		{"calls_and_indexes_are_operands", "brackets hide their contents", `"<t>" + m.content.split('</think>')[-1].lstrip('\n') + x[a + b]`,
			[]string{`"<t>"`, `m.content.split('</think>')[-1].lstrip('\n')`, `x[a + b]`}},
		{"plus_inside_a_literal_is_text", "quotes hide their contents", `'a+b' + c`, []string{`'a+b'`, `c`}},
		{"escaped_quote_in_literal", "backslash escapes the quote", `'it\'s' + c`, []string{`'it\'s'`, `c`}},
		{"first_operand_not_a_literal", "a + b may be a number sum", `a + 'b'`, nil},
		{"first_operand_literal_with_filter", "filter binding", `'a' | upper + b`, nil},
		{"filter_on_an_operand", "filter binding", `'a' + b | trim`, nil},
		{"minus_changes_meaning", "precedence", `'a' + b - c`, nil},
		{"tilde", "precedence", `'a' + b ~ c`, nil},
		{"conditional_expression", "precedence", `'a' + b if c else d`, nil},
		{"boolean_operator", "precedence", `'a' + b or c`, nil},
		{"comparison", "precedence", `'a' + b == c`, nil},
		{"membership_keyword", "precedence", `'a' + b in c`, nil},
		{"no_plus", "nothing to split", `'a'`, nil},
		{"empty_operand", "malformed", `'a' + `, nil},
		{"unbalanced_bracket", "malformed", `'a' + b)`, nil},
		{"unterminated_literal", "malformed", `'a + b`, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := splitConcat(c.expr)
			if ok != (c.want != nil) || !slices.Equal(got, c.want) {
				t.Errorf("%s: splitConcat(%q) = %q, %v; want %q", c.spec, c.expr, got, ok, c.want)
			}
		})
	}
}

// TestSplitConcatRender checks that split chains print what the whole chain prints,
// whitespace control included.
func TestSplitConcatRender(t *testing.T) {
	const body = `{"messages":[{"role":"user","content":"hi {{ x }}"},{"role":"assistant","content":"a+b"}],"add_generation_prompt":false}`
	cases := []struct{ name, tmpl, want string }{
		{"trim_both_sides", `{% for m in messages %}  {{- '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>' + '\n' -}}  {% endfor %}`,
			"<|im_start|>user\nhi {{ x }}<|im_end|>\n<|im_start|>assistant\na+b<|im_end|>\n"},
		{"method_calls_and_plain_tags", `{% for m in messages %}{{ "[" + m.role + "]" }}{{ '(' + m.content.upper() + ')' }}{% endfor %}`,
			"[user](HI {{ X }})[assistant](A+B)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := newSyntheticWithTemplate(t, c.tmpl).RenderChat([]byte(body), ChatOptions{})
			if err != nil || got != c.want {
				t.Errorf("render = %q, %v; want %q", got, err, c.want)
			}
		})
	}
}
