package reqjson

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Kind is the JSON type of a Value.
type Kind uint8

const (
	KindInvalid Kind = iota
	KindNull
	KindBool
	KindInt   // a number without fraction or exponent
	KindFloat // a number with a fraction or an exponent, NaN, Infinity, -Infinity
	KindString
	KindArray
	KindObject
)

func (k Kind) String() string {
	return [...]string{"invalid", "null", "a boolean", "an integer", "a float", "a string", "an array", "an object"}[k]
}

// Kind returns the JSON type of v.
func (v Value) Kind() Kind {
	if len(v) == 0 {
		return KindInvalid
	}
	switch c := v[0]; {
	case c == 'n':
		return KindNull
	case c == 't' || c == 'f':
		return KindBool
	case c == '"':
		return KindString
	case c == '[':
		return KindArray
	case c == '{':
		return KindObject
	case c == 'N' || c == 'I':
		return KindFloat
	case c == '-' || (c >= '0' && c <= '9'):
		if strings.ContainsAny(string(v), ".eEI") {
			return KindFloat
		}
		return KindInt
	}
	return KindInvalid
}

// IsNull reports whether v is null (a missing member is nil, also null to pydantic's Optional).
func (v Value) IsNull() bool { return len(v) == 0 || v.Kind() == KindNull }

// Str returns a string value decoded. pydantic's str fields take only strings.
func (v Value) Str() (string, error) {
	if v.Kind() != KindString || len(v) < 2 || v[len(v)-1] != '"' {
		return "", fmt.Errorf("%w: %s, not a string", ErrType, v.Kind())
	}
	raw := v[1 : len(v)-1]
	for _, c := range raw {
		if c == '\\' {
			var buf []byte
			return unescape(raw, &buf), nil
		}
	}
	return string(raw), nil
}

// Bool reads a bool field in pydantic's lax mode: true/false; the integers 0 and 1; the
// floats 0.0 and 1.0; the strings 0, off, f, false, n, no, 1, on, t, true, y, yes in any case.
func (v Value) Bool() (bool, error) {
	switch v.Kind() {
	case KindBool:
		return v[0] == 't', nil
	case KindInt, KindFloat:
		f, err := strconv.ParseFloat(string(v), 64)
		if err == nil && (f == 0 || f == 1) {
			return f == 1, nil
		}
	case KindString:
		s, _ := v.Str()
		switch strings.ToLower(s) {
		case "1", "on", "t", "true", "y", "yes":
			return true, nil
		case "0", "off", "f", "false", "n", "no":
			return false, nil
		}
	}
	return false, fmt.Errorf("%w: %.40s is not a valid boolean", ErrType, v)
}

// Int reads an int field in pydantic's lax mode: integers; floats with no fractional part
// below 2^63 in magnitude; true and false as 1 and 0; strings holding an optionally signed
// integer (underscores between digits allowed, surrounding whitespace ignored) or such an
// integer followed by a point and zeros. Integers beyond int64 are refused here (pydantic
// accepts them; no field the router reads has a use for them).
func (v Value) Int() (int64, error) {
	switch v.Kind() {
	case KindInt:
		n, err := strconv.ParseInt(string(v), 10, 64)
		if err == nil {
			return n, nil
		}
	case KindFloat:
		f, err := strconv.ParseFloat(string(v), 64)
		if (err == nil || isRangeErr(err)) && !math.IsNaN(f) && !math.IsInf(f, 0) && f == math.Trunc(f) && math.Abs(f) < 1<<63 {
			return int64(f), nil
		}
	case KindBool:
		if v[0] == 't' {
			return 1, nil
		}
		return 0, nil
	case KindString:
		s, _ := v.Str()
		if n, ok := laxIntString(s); ok {
			return n, nil
		}
	}
	return 0, fmt.Errorf("%w: %.40s is not a valid integer", ErrType, v)
}

// StrictInt reads an int in pydantic's strict mode: a JSON integer only.
func (v Value) StrictInt() (int64, bool) {
	if v.Kind() != KindInt {
		return 0, false
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	return n, err == nil
}

func isRangeErr(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}

// laxIntString is pydantic's str-to-int: trimmed, [+-]digits with single underscores between
// digits, optionally followed by "." and one or more zeros.
func laxIntString(s string) (int64, bool) {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '.'); i >= 0 {
		frac := s[i+1:]
		if frac == "" || strings.Trim(frac, "0") != "" {
			return 0, false
		}
		s = s[:i]
	}
	body := strings.TrimLeft(s, "+-")
	if len(s)-len(body) > 1 || body == "" || body[0] == '_' || body[len(body)-1] == '_' || strings.Contains(body, "__") {
		return 0, false
	}
	for _, c := range body {
		if (c < '0' || c > '9') && c != '_' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(strings.ReplaceAll(strings.TrimPrefix(s, "+"), "_", ""), 10, 64)
	return n, err == nil
}

// unescape decodes the contents of a validated JSON string with escapes. Lone surrogates
// become U+FFFD (Python keeps them as lone code points, which no tokenizer accepts).
func unescape(raw []byte, buf *[]byte) string {
	b := (*buf)[:0]
	for i := 0; i < len(raw); {
		c := raw[i]
		if c != '\\' {
			b = append(b, c)
			i++
			continue
		}
		e := raw[i+1]
		i += 2
		switch e {
		case 'b':
			b = append(b, '\b')
		case 'f':
			b = append(b, '\f')
		case 'n':
			b = append(b, '\n')
		case 'r':
			b = append(b, '\r')
		case 't':
			b = append(b, '\t')
		case 'u':
			r := hexRune(raw[i : i+4])
			i += 4
			if utf16.IsSurrogate(r) {
				if i+6 <= len(raw) && raw[i] == '\\' && raw[i+1] == 'u' {
					if d := utf16.DecodeRune(r, hexRune(raw[i+2:i+6])); d != utf8.RuneError {
						r = d
						i += 6
					} else {
						r = utf8.RuneError
					}
				} else {
					r = utf8.RuneError
				}
			}
			b = utf8.AppendRune(b, r)
		default: // " \ /
			b = append(b, e)
		}
	}
	*buf = b
	return string(b)
}

func hexRune(h []byte) rune {
	n, _ := strconv.ParseUint(string(h), 16, 32)
	return rune(n)
}
