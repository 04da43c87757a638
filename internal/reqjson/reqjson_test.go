package reqjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"unicode/utf8"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name, spec, body string
		key, want        string // want: the raw value Get(key) returns ("" : absent)
		err              bool
	}{
		{name: "exact_key_match", spec: "json.loads keys are exact", body: `{"prompt":"a","PROMPT":"b"}`, key: "prompt", want: `"a"`},
		{name: "case_variant_is_another_key", spec: "json.loads keys are exact", body: `{"PROMPT":"b"}`, key: "prompt"},
		{name: "duplicate_last_wins", spec: "dict: the last value of a repeated key", body: `{"model":"a","model":"b"}`, key: "model", want: `"b"`},
		{name: "escaped_key", spec: "keys compare after escapes", body: `{"mo\u0064el":"x"}`, key: "model", want: `"x"`},
		{name: "bom", spec: "json.loads(bytes) decodes utf-8-sig", body: "\xef\xbb\xbf{\"model\":1}", key: "model", want: `1`},
		{name: "nan_infinity", spec: "json.loads parse_constant", body: `{"t":NaN,"u":Infinity,"v":-Infinity}`, key: "v", want: `-Infinity`},
		{name: "whitespace", spec: "json whitespace", body: " \t\r\n{ \"a\" : [ 1 , 2 ] } \n", key: "a", want: `[ 1 , 2 ]`},
		{name: "utf16_refused", spec: "detect_encoding: refused with a clear error", body: "{\x00\"\x00", err: true},
		{name: "not_object", spec: "a routing body is an object", body: `[1]`, err: true},
		{name: "trailing_data", spec: "json.loads: Extra data", body: `{} {}`, err: true},
		{name: "leading_zero", spec: "json number grammar", body: `{"a":01}`, err: true},
		{name: "bare_point", spec: "json number grammar", body: `{"a":1.}`, err: true},
		{name: "control_char", spec: "json.loads strict=True", body: "{\"a\":\"x\ny\"}", err: true},
		{name: "invalid_utf8", spec: "bytes.decode('utf-8') fails", body: "{\"a\":\"\xff\"}", err: true},
		{name: "bad_escape", spec: "json escapes", body: `{"a":"\x"}`, err: true},
		{name: "nan_lowercase", spec: "only NaN", body: `{"a":nan}`, err: true},
		{name: "minus_nan", spec: "only -Infinity", body: `{"a":-NaN}`, err: true},
		{name: "empty", spec: "json.loads('')", body: ``, err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj, err := Parse([]byte(tc.body))
			if tc.err {
				if err == nil || !errors.Is(err, ErrSyntax) {
					t.Fatalf("Parse(%q) = %v; want an ErrSyntax error (%s)", tc.body, err, tc.spec)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%q): %v (%s)", tc.body, err, tc.spec)
			}
			v, ok := obj.Get(tc.key)
			if got := string(v); ok != (tc.want != "") || got != tc.want {
				t.Errorf("Get(%q) = %q, %v; want %q (%s)", tc.key, got, ok, tc.want, tc.spec)
			}
		})
	}
}

func TestLax(t *testing.T) {
	// pydantic 2.14 lax mode, each row checked with pydantic (scripts/reqjson-diff.py runs the
	// whole corpus against vLLM's own models).
	bools := map[string]any{`true`: true, `false`: false, `1`: true, `0`: false, `1.0`: true, `0.0`: false,
		`"true"`: true, `"TRUE"`: true, `"yes"`: true, `"on"`: true, `"t"`: true, `"y"`: true, `"1"`: true,
		`"Off"`: false, `"F"`: false, `"N"`: false, `"no"`: false, `"0"`: false,
		`2`: nil, `" true"`: nil, `"2"`: nil, `"1.0"`: nil, `""`: nil, `null`: nil, `[]`: nil}
	for in, want := range bools {
		got, err := Value(in).Bool()
		if want == nil {
			if err == nil {
				t.Errorf("Bool(%s) = %v; want an error", in, got)
			}
		} else if err != nil || got != want {
			t.Errorf("Bool(%s) = %v, %v; want %v", in, got, err, want)
		}
	}
	ints := map[string]any{`1`: int64(1), `1.0`: int64(1), `-0.0`: int64(0), `1e3`: int64(1000), `true`: int64(1),
		`false`: int64(0), `" 1"`: int64(1), `"+1"`: int64(1), `"1_000"`: int64(1000), `"01"`: int64(1),
		`"1.0"`: int64(1), `"-1"`: int64(-1), `1.5`: nil, `"1.5"`: nil, `"1."`: nil, `".5"`: nil, `"1e3"`: nil,
		`"0x10"`: nil, `"1__0"`: nil, `"_1"`: nil, `NaN`: nil, `Infinity`: nil, `9.3e18`: nil, `"a"`: nil, `null`: nil}
	for in, want := range ints {
		got, err := Value(in).Int()
		if want == nil {
			if err == nil {
				t.Errorf("Int(%s) = %v; want an error", in, got)
			}
		} else if err != nil || got != want {
			t.Errorf("Int(%s) = %v, %v; want %v", in, got, err, want)
		}
	}
}

func TestReadPrompt(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Prompt
		err  bool
	}{
		{in: `"x"`, want: Prompt{Text: "x", Sequences: 1}},
		{in: `[1,2]`, want: Prompt{IDs: []uint32{1, 2}, IsIDs: true, Sequences: 1}},
		{in: `[1.0,2]`, want: Prompt{IDs: []uint32{1, 2}, IsIDs: true, Sequences: 1}},
		{in: `["1",2]`, want: Prompt{IDs: []uint32{1, 2}, IsIDs: true, Sequences: 1}},
		{in: `[true,1]`, want: Prompt{IDs: []uint32{1, 1}, IsIDs: true, Sequences: 1}},
		{in: `["1","2"]`, want: Prompt{Text: "1", Sequences: 2}}, // strict list[str] wins
		{in: `["a"]`, want: Prompt{Text: "a", Sequences: 1}},
		{in: `[[1.0]]`, want: Prompt{IDs: []uint32{1}, IsIDs: true, Sequences: 1}},
		{in: `[[1],[2]]`, want: Prompt{IDs: []uint32{1}, IsIDs: true, Sequences: 2}},
		{in: `[]`, want: Prompt{IDs: []uint32{}, IsIDs: true, Sequences: 1}},
		{in: `[1.5]`, err: true},
		{in: `[-1]`, err: true},
		{in: `[1,"a"]`, err: true},
		{in: `{"a":1}`, err: true},
		{in: `5`, err: true},
	} {
		got, err := ReadPrompt(Value(tc.in))
		if tc.err {
			if err == nil {
				t.Errorf("ReadPrompt(%s) = %+v; want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got.Text != tc.want.Text || got.IsIDs != tc.want.IsIDs || got.Sequences != tc.want.Sequences ||
			!equalIDs(got.IDs, tc.want.IDs) {
			t.Errorf("ReadPrompt(%s) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

// TestValuesNeverPanic: the readers of a Value refuse values Parse never produced instead of
// panicking on them.
func TestValuesNeverPanic(t *testing.T) {
	for _, in := range []string{`"`, `[`, `[1`, `[1,`, `[1 2]`, `[1]x`, `{`, `{"a"`, `-`, `N`, ``, `t`, `"\`} {
		v := Value(in)
		_, _ = v.Str()
		_, _ = v.Bool()
		_, _ = v.Int()
		_, _ = v.Object()
		_, _ = ReadPrompt(v)
		if _, err := v.Elems(); err == nil && in != "" {
			t.Errorf("Elems(%q) accepted a broken array", in)
		}
	}
}

func equalIDs(a, b []uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// FuzzParse: no panic; on documents encoding/json can judge (no BOM, NaN or Infinity, valid
// UTF-8) both agree on validity, and every top-level key reads the value a map decode (exact
// keys, last one wins) reads.
func FuzzParse(f *testing.F) {
	for _, s := range []string{`{"model":"m","prompt":"x"}`, `{"prompt":"a","PROMPT":"b"}`, `{"a":NaN}`,
		"\xef\xbb\xbf{}", `{"a":[1,{"b":"\u00e9\ud83d\ude00"}],"a":2}`, `{"stream":"true","prompt":[1.0,2]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		obj, err := Parse(body)
		if err == nil {
			for _, m := range obj.Members {
				if m.Value.Kind() == KindInvalid {
					t.Fatalf("member %q has an invalid value %q", m.Key, m.Value)
				}
				if m.Value.Kind() == KindArray {
					if _, err := m.Value.Elems(); err != nil {
						t.Fatalf("Elems of a parsed array %q: %v", m.Value, err)
					}
				}
				_, _ = m.Value.Int()
				_, _ = m.Value.Bool()
				_, _ = ReadPrompt(m.Value)
			}
		}
		if bytes.HasPrefix(body, bom) || bytes.ContainsAny(body, "NI") || !utf8.Valid(body) {
			return
		}
		var m map[string]json.RawMessage
		stdErr := json.Unmarshal(body, &m)
		if (stdErr == nil) != (err == nil) && !(stdErr == nil && m == nil) {
			if stdErr == nil && deeperThan(body, MaxDepth) {
				return
			}
			t.Fatalf("Parse(%q) err = %v; encoding/json err = %v", body, err, stdErr)
		}
		if err != nil {
			return
		}
		for k, raw := range m {
			v, ok := obj.Get(k)
			if !ok || !bytes.Equal(bytes.TrimSpace(raw), v) {
				t.Fatalf("Get(%q) = %q, %v; encoding/json map decode read %q", k, v, ok, raw)
			}
		}
	})
}

func deeperThan(b []byte, n int) bool {
	d := 0
	for _, c := range b {
		if c == '[' || c == '{' {
			d++
			if d > n {
				return true
			}
		}
	}
	return false
}
