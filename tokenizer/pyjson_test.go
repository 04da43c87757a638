package tokenizer

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/ardanlabs/jinja"
)

// Expected strings were produced by CPython 3 json.dumps / repr.
func TestPyFloatRepr(t *testing.T) {
	cases := []struct {
		in   float64
		want string
	}{
		{1.0, "1.0"}, {0.1, "0.1"}, {1e16, "1e+16"}, {1e15, "1000000000000000.0"}, {1e-05, "1e-05"},
		{0.0001, "0.0001"}, {1.5e-07, "1.5e-07"}, {123456789.125, "123456789.125"}, {1e21, "1e+21"},
		{3.14159, "3.14159"}, {2.5e300, "2.5e+300"}, {5e-324, "5e-324"}, {100.0, "100.0"},
		{1234567890123456.0, "1234567890123456.0"}, {12345678901234567.0, "1.2345678901234568e+16"},
		{-2.5, "-2.5"}, {-1e-7, "-1e-07"},
	}
	for _, c := range cases {
		if got := pyFloatRepr(c.in); got != c.want {
			t.Errorf("pyFloatRepr(%v) = %q, want %q", c.in, got, c.want)
		}
	}
}

func mustJSONValue(t *testing.T, s string) jinja.Value {
	t.Helper()
	v, err := decodeJSONValue([]byte(s))
	if err != nil {
		t.Fatalf("decode %s: %v", s, err)
	}
	return v
}

func TestTojsonMatchesPythonJSONDumps(t *testing.T) {
	cases := []struct {
		name   string
		spec   string
		in     string
		kwargs map[string]jinja.Value
		want   string
	}{
		{
			name: "default_separators_key_order_and_escapes",
			spec: "json.dumps(x, ensure_ascii=False): ', ' and ': ', insertion order, U+2028 and <>& raw, \\u00XX controls",
			in:   `{"a":"\u2028<>&\u007f\u0001\"\\\n\t\b\f","é":[1,{"x":null}],"e":[],"d":{}}`,
			want: "{\"a\": \"\u2028<>&\x7f\\u0001\\\"\\\\\\n\\t\\b\\f\", \"é\": [1, {\"x\": null}], \"e\": [], \"d\": {}}",
		},
		{
			name:   "ensure_ascii_and_indent",
			spec:   "json.dumps(x, ensure_ascii=True, indent=2): surrogate pairs, ',' item separator, empty containers inline",
			in:     `{"a":"é😀\u007f","b":[1,2,{"c":true}],"e":[],"d":{}}`,
			kwargs: map[string]jinja.Value{"ensure_ascii": jinja.NewBool(true), "indent": jinja.NewInt(2)},
			want:   "{\n  \"a\": \"\\u00e9\\ud83d\\ude00\\u007f\",\n  \"b\": [\n    1,\n    2,\n    {\n      \"c\": true\n    }\n  ],\n  \"e\": [],\n  \"d\": {}\n}",
		},
		{
			name:   "sort_keys_and_separators",
			spec:   "json.dumps(x, sort_keys=True, separators=(',', ':'))",
			in:     `{"b":1,"a":[1,2]}`,
			kwargs: map[string]jinja.Value{"sort_keys": jinja.NewBool(true), "separators": jinja.NewList([]jinja.Value{jinja.NewString(","), jinja.NewString(":")})},
			want:   `{"a":[1,2],"b":1}`,
		},
		{
			name: "floats_keep_python_repr_and_ints_stay_ints",
			spec: "json.loads then json.dumps: 1.0 stays 1.0, 9007199254740993 stays exact",
			in:   `[1.0, 1e15, 1.5e-7, 9007199254740993, -0.0]`,
			want: `[1.0, 1000000000000000.0, 1.5e-07, 9007199254740993, -0.0]`,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v, err := tojsonFilter([]jinja.Value{mustJSONValue(t, c.in)}, c.kwargs)
			if err != nil {
				t.Fatalf("tojson (%s): %v", c.spec, err)
			}
			if got := v.AsString(); got != c.want {
				t.Errorf("tojson (%s):\n got %q\nwant %q", c.spec, got, c.want)
			}
		})
	}
}

func TestDecodeJSONValueRejectsBadInput(t *testing.T) {
	deep := make([]byte, 0, 400)
	for range 200 {
		deep = append(deep, '[')
	}
	for _, in := range []string{`{"a":1} x`, `{"a":}`, string(deep), `[1,`} {
		if _, err := decodeJSONValue([]byte(in)); err == nil {
			t.Errorf("decodeJSONValue(%.20q) = nil error, want error", in)
		}
	}
}

// FuzzDecodeJSONValue: the request-body parser accepts exactly what
// encoding/json accepts (within its depth bound), never panics, and what it
// decodes re-encodes through tojson to the same data.
func FuzzDecodeJSONValue(f *testing.F) {
	reqs := readJSONL[json.RawMessage](f, "conformance_chats.jsonl.gz")
	for i := 0; i < len(reqs); i += 37 {
		f.Add([]byte(reqs[i]))
	}
	for _, s := range []string{`{"a":1,"a":2}`, `"\ud83d\ude00\ud800x"`, `[1e400,-0,0.5e-3]`, `{"k":[true,false,null]}`, "\"\xff\""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := decodeJSONValue(data)
		if bytes.Count(data, []byte("["))+bytes.Count(data, []byte("{")) > maxJSONDepth {
			return
		}
		if (err == nil) != json.Valid(data) {
			t.Fatalf("decodeJSONValue error %v, json.Valid %v, for %q", err, json.Valid(data), data)
		}
		if err != nil {
			return
		}
		out, err := tojsonFilter([]jinja.Value{v}, nil)
		if err != nil {
			t.Fatalf("tojson of decoded %q: %v", data, err)
		}
		if strings.Contains(out.AsString(), "Infinity") || strings.Contains(out.AsString(), "NaN") {
			return
		}
		var a, b any
		if err := json.Unmarshal(data, &a); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(out.AsString()), &b); err != nil {
			t.Fatalf("tojson output %q does not parse: %v", out.AsString(), err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("round trip changed %q into %q", data, out.AsString())
		}
	})
}
