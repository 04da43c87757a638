package reqjson

import (
	"bytes"
	"errors"
	"fmt"
	"unicode/utf8"
)

// MaxDepth bounds the nesting of arrays and objects. Python's decoder stops near its recursion
// limit (1,000 frames); deeper documents are refused here as they are there.
const MaxDepth = 1000

// ErrSyntax is wrapped by every error for a body that is not one JSON document as Python's
// json.loads reads it.
var ErrSyntax = errors.New("invalid JSON")

// ErrType is wrapped by every error for a value of the wrong type for the field asked for.
var ErrType = errors.New("wrong type")

var bom = []byte("\xef\xbb\xbf")

// Value is one JSON value: a span of the document, without surrounding whitespace.
type Value []byte

// Member is one member of an object, in document order. Key is decoded (escapes resolved);
// [Start, End) is the member's span in the parsed document, from the key's opening quote to
// the end of the value (separators excluded).
type Member struct {
	Key        string
	Value      Value
	Start, End int
}

// Object is a JSON object's members in document order, duplicates included.
type Object struct {
	Members []Member
}

// Get returns the value of the last member named key, as Python's dict keeps it.
func (o Object) Get(key string) (Value, bool) {
	for i := len(o.Members) - 1; i >= 0; i-- {
		if o.Members[i].Key == key {
			return o.Members[i].Value, true
		}
	}
	return nil, false
}

// Has reports whether key is present with a value other than null.
func (o Object) Has(key string) bool {
	v, ok := o.Get(key)
	return ok && !v.IsNull()
}

// Parse validates body as one JSON document and returns its top-level object. A leading UTF-8
// BOM is skipped; a body that is not an object, or that Python's json.loads would refuse, is
// an error wrapping ErrSyntax with the byte offset.
func Parse(body []byte) (Object, error) {
	p := parser{data: body}
	if err := p.start(); err != nil {
		return Object{}, err
	}
	p.space()
	if p.pos >= len(p.data) || p.data[p.pos] != '{' {
		if p.pos >= len(p.data) {
			return Object{}, p.errorf("empty body")
		}
		return Object{}, p.errorf("the body is not a JSON object")
	}
	obj, err := p.object(0, true)
	if err != nil {
		return Object{}, err
	}
	p.space()
	if p.pos != len(p.data) {
		return Object{}, p.errorf("extra data after the JSON object")
	}
	return obj, nil
}

// Validate checks that body is one JSON document as json.loads reads it (any value at the top).
func Validate(body []byte) error {
	p := parser{data: body}
	if err := p.start(); err != nil {
		return err
	}
	p.space()
	if err := p.value(0); err != nil {
		return err
	}
	p.space()
	if p.pos != len(p.data) {
		return p.errorf("extra data after the JSON value")
	}
	return nil
}

// Elems returns the elements of an array value.
func (v Value) Elems() ([]Value, error) {
	if v.Kind() != KindArray {
		return nil, fmt.Errorf("%w: %s is not an array", ErrType, v.Kind())
	}
	p := parser{data: v, pos: 1}
	var out []Value
	p.space()
	if p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.pos++
		return out, p.end()
	}
	for {
		p.space()
		start := p.pos
		if err := p.value(1); err != nil {
			return nil, err
		}
		out = append(out, v[start:p.pos])
		p.space()
		if p.pos >= len(p.data) {
			return nil, p.errorf("unterminated array")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
		case ']':
			p.pos++
			return out, p.end()
		default:
			return nil, p.errorf("expecting ',' or ']' in an array")
		}
	}
}

// Object returns the members of an object value (already validated by Parse).
func (v Value) Object() (Object, error) {
	if v.Kind() != KindObject {
		return Object{}, fmt.Errorf("%w: %s is not an object", ErrType, v.Kind())
	}
	p := parser{data: v}
	return p.object(0, true)
}

// parser is a recursive-descent reader of one document with Python's json grammar.
type parser struct {
	data []byte
	pos  int
	buf  []byte // scratch for keys with escapes
}

// end checks that nothing but whitespace follows.
func (p *parser) end() error {
	p.space()
	if p.pos != len(p.data) {
		return p.errorf("extra data after the JSON value")
	}
	return nil
}

func (p *parser) errorf(format string, args ...any) error {
	return fmt.Errorf("%w at byte %d: %s", ErrSyntax, p.pos, fmt.Sprintf(format, args...))
}

// start skips a UTF-8 BOM and refuses the encodings json.loads would detect besides UTF-8.
func (p *parser) start() error {
	d := p.data
	if bytes.HasPrefix(d, bom) {
		p.pos = len(bom)
		return nil
	}
	if len(d) >= 2 && (d[0] == 0 || d[1] == 0 || (d[0] == 0xff && d[1] == 0xfe) || (d[0] == 0xfe && d[1] == 0xff)) {
		return p.errorf("the body is UTF-16 or UTF-32; send it as UTF-8")
	}
	return nil
}

func (p *parser) space() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *parser) value(depth int) error {
	if depth > MaxDepth {
		return p.errorf("nested deeper than %d", MaxDepth)
	}
	if p.pos >= len(p.data) {
		return p.errorf("unexpected end of the body")
	}
	switch c := p.data[p.pos]; {
	case c == '{':
		_, err := p.object(depth, false)
		return err
	case c == '[':
		return p.array(depth)
	case c == '"':
		_, err := p.str(false)
		return err
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	case c == 't':
		return p.literal("true")
	case c == 'f':
		return p.literal("false")
	case c == 'n':
		return p.literal("null")
	case c == 'N':
		return p.literal("NaN")
	case c == 'I':
		return p.literal("Infinity")
	}
	return p.errorf("unexpected character %q", p.data[p.pos])
}

func (p *parser) literal(word string) error {
	if !bytes.HasPrefix(p.data[p.pos:], []byte(word)) {
		return p.errorf("invalid literal")
	}
	p.pos += len(word)
	return nil
}

// object reads an object at p.pos; with keep it returns the members.
func (p *parser) object(depth int, keep bool) (Object, error) {
	var obj Object
	p.pos++ // {
	p.space()
	if p.pos < len(p.data) && p.data[p.pos] == '}' {
		p.pos++
		return obj, nil
	}
	for {
		p.space()
		if p.pos >= len(p.data) || p.data[p.pos] != '"' {
			return obj, p.errorf("expecting a property name in double quotes")
		}
		memberStart := p.pos
		key, err := p.str(keep)
		if err != nil {
			return obj, err
		}
		p.space()
		if p.pos >= len(p.data) || p.data[p.pos] != ':' {
			return obj, p.errorf("expecting ':' after a property name")
		}
		p.pos++
		p.space()
		start := p.pos
		if err := p.value(depth + 1); err != nil {
			return obj, err
		}
		if keep {
			obj.Members = append(obj.Members, Member{Key: key, Value: Value(p.data[start:p.pos]), Start: memberStart, End: p.pos})
		}
		p.space()
		if p.pos >= len(p.data) {
			return obj, p.errorf("unterminated object")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
		case '}':
			p.pos++
			return obj, nil
		default:
			return obj, p.errorf("expecting ',' or '}' in an object")
		}
	}
}

func (p *parser) array(depth int) error {
	p.pos++ // [
	p.space()
	if p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.pos++
		return nil
	}
	for {
		p.space()
		if err := p.value(depth + 1); err != nil {
			return err
		}
		p.space()
		if p.pos >= len(p.data) {
			return p.errorf("unterminated array")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
		case ']':
			p.pos++
			return nil
		default:
			return p.errorf("expecting ',' or ']' in an array")
		}
	}
}

// number reads -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? or -Infinity.
func (p *parser) number() error {
	if p.data[p.pos] == '-' {
		p.pos++
		if p.pos < len(p.data) && p.data[p.pos] == 'I' {
			return p.literal("Infinity")
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
	if n := digits(); n == 0 {
		return p.errorf("invalid number")
	} else if p.data[intStart] == '0' && n > 1 {
		p.pos = intStart + 1 // json.loads reads "0" and then finds extra data
		return p.errorf("invalid number (leading zero)")
	}
	if p.pos+1 < len(p.data) && p.data[p.pos] == '.' && p.data[p.pos+1] >= '0' && p.data[p.pos+1] <= '9' {
		p.pos++
		digits()
	}
	if p.pos < len(p.data) && (p.data[p.pos] == 'e' || p.data[p.pos] == 'E') {
		save := p.pos
		p.pos++
		if p.pos < len(p.data) && (p.data[p.pos] == '+' || p.data[p.pos] == '-') {
			p.pos++
		}
		if digits() == 0 {
			p.pos = save // not an exponent: what follows is extra data
		}
	}
	return nil
}

// str reads a string at p.pos (the opening quote); with keep it returns it decoded.
func (p *parser) str(keep bool) (string, error) {
	p.pos++ // "
	start := p.pos
	escaped := false
	for p.pos < len(p.data) {
		c := p.data[p.pos]
		switch {
		case c == '"':
			raw := p.data[start:p.pos]
			p.pos++
			if !utf8.Valid(raw) {
				return "", p.errorf("invalid UTF-8 in a string")
			}
			if !keep {
				return "", nil
			}
			if !escaped {
				return string(raw), nil
			}
			return unescape(raw, &p.buf), nil
		case c < 0x20:
			return "", p.errorf("invalid control character in a string")
		case c == '\\':
			escaped = true
			if p.pos+1 >= len(p.data) {
				return "", p.errorf("unterminated string")
			}
			switch p.data[p.pos+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				p.pos += 2
			case 'u':
				if p.pos+6 > len(p.data) || !isHex4(p.data[p.pos+2:p.pos+6]) {
					return "", p.errorf("invalid \\uXXXX escape")
				}
				p.pos += 6
			default:
				return "", p.errorf("invalid escape")
			}
		default:
			p.pos++
		}
	}
	return "", p.errorf("unterminated string")
}

func isHex4(b []byte) bool {
	for _, c := range b {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}
