package tokenizer

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"
)

// pyJSONOptions are the arguments of transformers' tojson filter, which calls
// json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
type pyJSONOptions struct {
	ensureASCII bool
	indent      int // < 0: no indent
	itemSep     string
	keySep      string
	sortKeys    bool
}

// tojsonFilter is the template filter matching transformers' tojson byte for byte.
func tojsonFilter(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Undefined(), fmt.Errorf("tojson: missing value")
	}
	o := pyJSONOptions{indent: -1}
	named := []string{"ensure_ascii", "indent", "separators", "sort_keys"}
	vals := map[string]jinja.Value{}
	for i, a := range args[1:] {
		if i >= len(named) {
			return jinja.Undefined(), fmt.Errorf("tojson: too many arguments")
		}
		vals[named[i]] = a
	}
	for k, v := range kwargs {
		vals[k] = v
	}
	for k, v := range vals {
		switch k {
		case "ensure_ascii":
			o.ensureASCII = v.IsTruthy()
		case "sort_keys":
			o.sortKeys = v.IsTruthy()
		case "indent":
			switch {
			case v.IsNone() || v.IsUndefined():
			case v.IsInt():
				o.indent = int(max(v.AsInt(), 0))
			default:
				return jinja.Undefined(), fmt.Errorf("tojson: indent %v is not an int", v)
			}
		case "separators":
			if v.IsNone() {
				continue
			}
			if !v.IsList() || v.AsList().Len() != 2 || !v.AsList().Get(0).IsString() || !v.AsList().Get(1).IsString() {
				return jinja.Undefined(), fmt.Errorf("tojson: separators %v: want two strings", v)
			}
			o.itemSep, o.keySep = v.AsList().Get(0).AsString(), v.AsList().Get(1).AsString()
		default:
			return jinja.Undefined(), fmt.Errorf("tojson: unexpected argument %q", k)
		}
	}
	if o.keySep == "" && o.itemSep == "" {
		o.itemSep, o.keySep = ", ", ": "
		if o.indent >= 0 {
			o.itemSep = ","
		}
	}
	var sb strings.Builder
	if err := writePyJSON(&sb, args[0], &o, 0); err != nil {
		return jinja.Undefined(), err
	}
	return jinja.NewString(sb.String()), nil
}

func writePyJSON(sb *strings.Builder, v jinja.Value, o *pyJSONOptions, level int) error {
	switch {
	case v.IsNone() || v.IsUndefined():
		sb.WriteString("null")
	case v.IsBool():
		if v.AsBool() {
			sb.WriteString("true")
		} else {
			sb.WriteString("false")
		}
	case v.IsInt():
		sb.WriteString(strconv.FormatInt(v.AsInt(), 10))
	case v.IsFloat():
		sb.WriteString(pyFloatRepr(v.AsFloat()))
	case v.IsString():
		writePyString(sb, v.AsString(), o.ensureASCII)
	case v.IsList():
		items := v.AsList().Items
		if len(items) == 0 {
			sb.WriteString("[]")
			return nil
		}
		sb.WriteByte('[')
		for i, it := range items {
			if i > 0 {
				sb.WriteString(o.itemSep)
			}
			newline(sb, o, level+1)
			if err := writePyJSON(sb, it, o, level+1); err != nil {
				return err
			}
		}
		newline(sb, o, level)
		sb.WriteByte(']')
	case v.IsDict():
		d := v.AsDict()
		keys := d.Keys
		if o.sortKeys {
			keys = append([]string(nil), keys...)
			sort.Strings(keys)
		}
		if len(keys) == 0 {
			sb.WriteString("{}")
			return nil
		}
		sb.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				sb.WriteString(o.itemSep)
			}
			newline(sb, o, level+1)
			writePyString(sb, k, o.ensureASCII)
			sb.WriteString(o.keySep)
			if err := writePyJSON(sb, d.Data[k], o, level+1); err != nil {
				return err
			}
		}
		newline(sb, o, level)
		sb.WriteByte('}')
	default:
		return fmt.Errorf("tojson: cannot encode %s", v)
	}
	return nil
}

func newline(sb *strings.Builder, o *pyJSONOptions, level int) {
	if o.indent < 0 {
		return
	}
	sb.WriteByte('\n')
	for range level * o.indent {
		sb.WriteByte(' ')
	}
}

const hexDigits = "0123456789abcdef"

// writePyString writes s as Python's json.dumps does.
func writePyString(sb *strings.Builder, s string, ensureASCII bool) {
	sb.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			sb.WriteString(`\"`)
		case '\\':
			sb.WriteString(`\\`)
		case '\n':
			sb.WriteString(`\n`)
		case '\r':
			sb.WriteString(`\r`)
		case '\t':
			sb.WriteString(`\t`)
		case '\b':
			sb.WriteString(`\b`)
		case '\f':
			sb.WriteString(`\f`)
		default:
			switch {
			case r < 0x20 || (ensureASCII && r > 0x7e && r < 0x10000):
				writeU4(sb, r)
			case ensureASCII && r >= 0x10000:
				r -= 0x10000
				writeU4(sb, 0xD800+(r>>10))
				writeU4(sb, 0xDC00+(r&0x3FF))
			default:
				var buf [utf8.UTFMax]byte
				sb.Write(buf[:utf8.EncodeRune(buf[:], r)])
			}
		}
	}
	sb.WriteByte('"')
}

func writeU4(sb *strings.Builder, r rune) {
	sb.WriteString(`\u`)
	for shift := 12; shift >= 0; shift -= 4 {
		sb.WriteByte(hexDigits[(r>>shift)&0xF])
	}
}

// pyFloatRepr formats f as Python's repr(float): the shortest round-trip digits,
// positional notation for exponents in [-4, 16) with at least one decimal, else
// scientific with a two-digit exponent.
func pyFloatRepr(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // [-]d[.ddd]e±XX
	mant, expStr, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(expStr)
	sign := ""
	if strings.HasPrefix(mant, "-") {
		sign, mant = "-", mant[1:]
	}
	digits := strings.Replace(mant, ".", "", 1)
	if exp < -4 || exp >= 16 {
		m := digits[:1]
		if len(digits) > 1 {
			m += "." + digits[1:]
		}
		es := "+"
		if exp < 0 {
			es, exp = "-", -exp
		}
		return fmt.Sprintf("%s%se%s%02d", sign, m, es, exp)
	}
	if exp < 0 {
		return sign + "0." + strings.Repeat("0", -exp-1) + digits
	}
	if len(digits) <= exp+1 {
		return sign + digits + strings.Repeat("0", exp+1-len(digits)) + ".0"
	}
	return sign + digits[:exp+1] + "." + digits[exp+1:]
}
