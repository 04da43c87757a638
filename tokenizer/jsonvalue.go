package tokenizer

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"

	"github.com/ardanlabs/jinja"
)

// maxJSONDepth bounds the nesting of request bodies decoded into template values.
const maxJSONDepth = 128

// utf8BOM is the byte order mark json.loads skips on a UTF-8 body.
var utf8BOM = []byte("\xef\xbb\xbf")

// errJSONSyntax is wrapped by every decodeJSONValue syntax error.
var errJSONSyntax = errors.New("invalid JSON")

// decodeJSONValue decodes one JSON document (RFC 8259) into a template value,
// keeping object key order (Python dicts keep insertion order, and templates
// print them with tojson); a repeated key keeps its first position and last
// value, as json.loads does. Integers stay integers. Invalid UTF-8 and lone
// surrogate escapes become U+FFFD, as encoding/json does.
func decodeJSONValue(data []byte) (jinja.Value, error) {
	return decodeJSON(jsonParser{data: data})
}

// decodeJSONBorrowed is decodeJSONValue for a document that stays unchanged
// while the returned value is in use: strings without escapes share data's
// memory instead of being copied. Chat rendering uses it on the request body,
// whose values live only until the rendered prompt (a fresh string) is built.
func decodeJSONBorrowed(data []byte) (jinja.Value, error) {
	return decodeJSON(jsonParser{data: data, borrow: true})
}

func decodeJSON(p jsonParser) (jinja.Value, error) {
	if bytes.HasPrefix(p.data, utf8BOM) {
		p.pos = len(utf8BOM) // json.loads(bytes) decodes utf-8-sig
	}
	p.skipSpace()
	v, err := p.value(0)
	if err != nil {
		return jinja.Undefined(), err
	}
	p.skipSpace()
	if p.pos != len(p.data) {
		return jinja.Undefined(), p.errorf("trailing data after the JSON value")
	}
	return v, nil
}

// jsonParser is a recursive-descent JSON parser over one document.
type jsonParser struct {
	data []byte
	pos  int
	buf  []byte // scratch for strings with escapes
	// borrow: strings without escapes point into data (see decodeJSONBorrowed).
	borrow bool
}

func (p *jsonParser) errorf(format string, args ...any) error {
	return fmt.Errorf("%w at offset %d: %s", errJSONSyntax, p.pos, fmt.Sprintf(format, args...))
}

func (p *jsonParser) skipSpace() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *jsonParser) value(depth int) (jinja.Value, error) {
	if depth > maxJSONDepth {
		return jinja.Undefined(), p.errorf("nested deeper than %d", maxJSONDepth)
	}
	if p.pos >= len(p.data) {
		return jinja.Undefined(), p.errorf("unexpected end of input")
	}
	switch c := p.data[p.pos]; {
	case c == '{':
		return p.object(depth)
	case c == '[':
		return p.array(depth)
	case c == '"':
		s, err := p.str()
		if err != nil {
			return jinja.Undefined(), err
		}
		return jinja.NewString(s), nil
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	case c == 't':
		return p.literal("true", jinja.NewBool(true))
	case c == 'f':
		return p.literal("false", jinja.NewBool(false))
	case c == 'n':
		return p.literal("null", jinja.None())
	case c == 'N': // Python's json.loads reads NaN, Infinity and -Infinity as floats
		return p.literal("NaN", jinja.NewFloat(math.NaN()))
	case c == 'I':
		return p.literal("Infinity", jinja.NewFloat(math.Inf(1)))
	default:
		return jinja.Undefined(), p.errorf("unexpected character %q", c)
	}
}

func (p *jsonParser) literal(word string, v jinja.Value) (jinja.Value, error) {
	if !strings.HasPrefix(string(p.data[p.pos:min(p.pos+len(word), len(p.data))]), word) {
		return jinja.Undefined(), p.errorf("invalid literal")
	}
	p.pos += len(word)
	return v, nil
}

func (p *jsonParser) object(depth int) (jinja.Value, error) {
	p.pos++ // {
	d := jinja.NewDict()
	dict := d.AsDict()
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == '}' {
		p.pos++
		return d, nil
	}
	for {
		p.skipSpace()
		if p.pos >= len(p.data) || p.data[p.pos] != '"' {
			return jinja.Undefined(), p.errorf("want an object key")
		}
		k, err := p.str()
		if err != nil {
			return jinja.Undefined(), err
		}
		p.skipSpace()
		if p.pos >= len(p.data) || p.data[p.pos] != ':' {
			return jinja.Undefined(), p.errorf("want ':' after an object key")
		}
		p.pos++
		p.skipSpace()
		v, err := p.value(depth + 1)
		if err != nil {
			return jinja.Undefined(), err
		}
		dict.Set(k, v)
		p.skipSpace()
		if p.pos >= len(p.data) {
			return jinja.Undefined(), p.errorf("unterminated object")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
		case '}':
			p.pos++
			return d, nil
		default:
			return jinja.Undefined(), p.errorf("want ',' or '}' in an object")
		}
	}
}

func (p *jsonParser) array(depth int) (jinja.Value, error) {
	p.pos++ // [
	var items []jinja.Value
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.pos++
		return jinja.NewList(items), nil
	}
	for {
		p.skipSpace()
		v, err := p.value(depth + 1)
		if err != nil {
			return jinja.Undefined(), err
		}
		items = append(items, v)
		p.skipSpace()
		if p.pos >= len(p.data) {
			return jinja.Undefined(), p.errorf("unterminated array")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
		case ']':
			p.pos++
			return jinja.NewList(items), nil
		default:
			return jinja.Undefined(), p.errorf("want ',' or ']' in an array")
		}
	}
}

// str parses a string literal starting at the opening quote.
func (p *jsonParser) str() (string, error) {
	p.pos++ // "
	start := p.pos
	// Fast path: up to the next quote, no escapes and no control characters.
	if q := bytes.IndexByte(p.data[start:], '"'); q >= 0 {
		s := p.data[start : start+q]
		n := plainPrefix(s)
		if n == len(s) {
			p.pos = start + q + 1
			if utf8.Valid(s) {
				if p.borrow && len(s) > 0 {
					return unsafe.String(&s[0], len(s)), nil
				}
				return string(s), nil
			}
			return replaceInvalidBytes(s), nil
		}
		p.pos = start + n
	}
	p.buf = append(p.buf[:0], p.data[start:p.pos]...)
	for p.pos < len(p.data) {
		c := p.data[p.pos]
		switch {
		case c == '"':
			p.pos++
			if utf8.Valid(p.buf) {
				return string(p.buf), nil
			}
			return replaceInvalidBytes(p.buf), nil
		case c < 0x20:
			return "", p.errorf("control character in a string")
		case c != '\\':
			end := p.pos + 1
			for end < len(p.data) && p.data[end] != '"' && p.data[end] != '\\' && p.data[end] >= 0x20 {
				end++
			}
			p.buf = append(p.buf, p.data[p.pos:end]...)
			p.pos = end
			continue
		}
		if p.pos+1 >= len(p.data) {
			break
		}
		if err := p.escape(); err != nil {
			return "", err
		}
	}
	return "", p.errorf("unterminated string")
}

// plainPrefix returns the length of the prefix of s that holds no backslash and no
// control character.
func plainPrefix(s []byte) int {
	n := len(s)
	if i := bytes.IndexByte(s, '\\'); i >= 0 {
		n = i
	}
	i := 0
	for ; i+8 <= n; i += 8 {
		// A byte below 0x20 sets its top bit in w - 0x20 (per byte) while its own top bit is clear.
		w := binary.LittleEndian.Uint64(s[i:])
		if (w-0x2020202020202020)&^w&0x8080808080808080 != 0 {
			break
		}
	}
	for ; i < n; i++ {
		if s[i] < 0x20 {
			return i
		}
	}
	return n
}

// escape decodes the escape sequence at p.pos (a backslash) into p.buf.
func (p *jsonParser) escape() error {
	esc := p.data[p.pos+1]
	p.pos += 2
	switch esc {
	case '"', '\\', '/':
		p.buf = append(p.buf, esc)
	case 'b':
		p.buf = append(p.buf, '\b')
	case 'f':
		p.buf = append(p.buf, '\f')
	case 'n':
		p.buf = append(p.buf, '\n')
	case 'r':
		p.buf = append(p.buf, '\r')
	case 't':
		p.buf = append(p.buf, '\t')
	case 'u':
		r, ok := p.hex4()
		if !ok {
			return p.errorf("bad \\u escape")
		}
		if utf16.IsSurrogate(r) {
			r = p.lowSurrogate(r)
		}
		p.buf = utf8.AppendRune(p.buf, r)
	default:
		return p.errorf("bad escape \\%c", esc)
	}
	return nil
}

// lowSurrogate combines the high surrogate hi with a following \uXXXX low
// surrogate; a lone or mismatched surrogate becomes U+FFFD and the following
// escape, if any, is decoded on its own.
func (p *jsonParser) lowSurrogate(hi rune) rune {
	if p.pos+1 >= len(p.data) || p.data[p.pos] != '\\' || p.data[p.pos+1] != 'u' {
		return utf8.RuneError
	}
	save := p.pos
	p.pos += 2
	lo, ok := p.hex4()
	if ok {
		if r := utf16.DecodeRune(hi, lo); r != utf8.RuneError {
			return r
		}
	}
	p.pos = save
	return utf8.RuneError
}

func (p *jsonParser) hex4() (rune, bool) {
	if p.pos+4 > len(p.data) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(p.data[p.pos:p.pos+4]), 16, 32)
	if err != nil {
		return 0, false
	}
	p.pos += 4
	return rune(v), true
}

// number parses an RFC 8259 number: integers stay ints when they fit int64.
func (p *jsonParser) number() (jinja.Value, error) {
	start := p.pos
	if p.data[p.pos] == '-' {
		p.pos++
		if p.pos < len(p.data) && p.data[p.pos] == 'I' {
			return p.literal("Infinity", jinja.NewFloat(math.Inf(-1)))
		}
	}
	digits := func() int {
		n := 0
		for p.pos < len(p.data) && p.data[p.pos] >= '0' && p.data[p.pos] <= '9' {
			p.pos++
			n++
		}
		return n
	}
	intStart := p.pos
	if digits() == 0 || (p.data[intStart] == '0' && p.pos-intStart > 1) {
		return jinja.Undefined(), p.errorf("bad number")
	}
	isFloat := false
	if p.pos < len(p.data) && p.data[p.pos] == '.' {
		p.pos++
		isFloat = true
		if digits() == 0 {
			return jinja.Undefined(), p.errorf("bad number")
		}
	}
	if p.pos < len(p.data) && (p.data[p.pos] == 'e' || p.data[p.pos] == 'E') {
		p.pos++
		isFloat = true
		if p.pos < len(p.data) && (p.data[p.pos] == '+' || p.data[p.pos] == '-') {
			p.pos++
		}
		if digits() == 0 {
			return jinja.Undefined(), p.errorf("bad number")
		}
	}
	s := string(p.data[start:p.pos])
	if !isFloat {
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return jinja.NewInt(i), nil
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return jinja.Undefined(), p.errorf("bad number %s", s)
	}
	return jinja.NewFloat(f), nil
}

// replaceInvalidBytes replaces every byte of an invalid UTF-8 sequence with
// U+FFFD, as encoding/json does.
func replaceInvalidBytes(b []byte) string {
	var sb strings.Builder
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r == utf8.RuneError && n == 1 {
			sb.WriteString("\uFFFD")
		} else {
			sb.Write(b[:n])
		}
		b = b[n:]
	}
	return sb.String()
}
