package route

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
)

// streamClean runs body through a StreamCleaner in chunks cut at the given offsets.
func streamClean(body []byte, cuts ...int) ([]byte, []string, error) {
	var c StreamCleaner
	var out []byte
	prev := 0
	for _, at := range append(cuts, len(body)) {
		at = min(max(at, prev), len(body))
		var err error
		if out, err = c.Write(out, body[prev:at]); err != nil {
			return out, c.Cut(), err
		}
		prev = at
	}
	return out, c.Cut(), c.Close()
}

// TestStreamCleaner: the chunked cleaner gives Clean's object at every split point (issue 23
// item 1: STREAMED and full-duplex passthrough bodies).
func TestStreamCleaner(t *testing.T) {
	for _, in := range []string{
		`{"model":"m","kv_transfer_params":{"remote_host":"10.0.0.9","b":[1,"}\"]"]},"prompt":"x"}`,
		`{"kv_transfer_params":null}`, `{}`, ` { } `,
		`{"kv\u005ftransfer_params":1,"a":NaN,"vllm_xargs":{"kv_transfer_params":"x"},"b":-Infinity}`,
		"\xef\xbb\xbf{\"ec_transfer_params\":{},\"input\":[true,false,null,1.5e3]}",
		`{"a":1,"kv_transfer_params":2,"kv_transfer_params":3}`,
		`{"KV_TRANSFER_PARAMS":1,"x":"kv_transfer_params"}`,
		`{"` + string(make([]byte, 0)) + `aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"b":1,"kv_transfer_params":{}}`,
	} {
		want, wantCut, err := Clean([]byte(in))
		if err != nil {
			t.Fatalf("Clean(%q): %v", in, err)
		}
		for a := 0; a <= len(in); a++ {
			got, cut, err := streamClean([]byte(in), a, a+3)
			if err != nil || !sameJSON(got, want) || len(cut) != len(wantCut) {
				t.Fatalf("split at %d: %q, %v, %v; want %q, %v", a, got, cut, err, want, wantCut)
			}
		}
	}
	for _, bad := range []string{`[1]`, `{"a":1`, `{"a":1}}`, `{"a" 1}`, `{,}`, `x`, "\xef\xbb{}", `{"a":1,}`} {
		if got, _, err := streamClean([]byte(bad), 2); !errors.Is(err, ErrInvalidBody) {
			t.Errorf("streamClean(%q) = %q, %v; want ErrInvalidBody", bad, got, err)
		}
	}
}

func sameJSON(a, b []byte) bool {
	if len(b) >= 3 && string(b[:3]) == "\xef\xbb\xbf" {
		if len(a) < 3 || string(a[:3]) != string(b[:3]) {
			return false
		}
		a, b = a[3:], b[3:]
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return string(a) == string(b) // NaN and friends: compare bytes after removing spaces
	}
	return reflect.DeepEqual(x, y)
}

// FuzzStreamCleaner: on every valid JSON object, split anywhere, the output is Clean's object
// and holds no engine-control member.
func FuzzStreamCleaner(f *testing.F) {
	f.Add([]byte(`{"model":"m","kv_transfer_params":{"x":1},"prompt":[1,2]}`), uint16(5), uint16(9))
	f.Add([]byte(`{"kv\u005ftransfer_params":1 , "a" : [ "\"" ] }`), uint16(3), uint16(30))
	f.Fuzz(func(t *testing.T, body []byte, a, b uint16) {
		got, _, serr := streamClean(body, int(a), int(b))
		var in map[string]any
		if json.Unmarshal(body, &in) != nil || in == nil {
			return
		}
		want, _, err := Clean(body)
		if err != nil {
			return
		}
		if serr != nil {
			t.Fatalf("streamClean(%q) failed on a body Clean reads: %v", body, serr)
		}
		var out map[string]any
		if err := json.Unmarshal(got, &out); err != nil {
			t.Fatalf("streamClean(%q) = %q: %v", body, got, err)
		}
		var w map[string]any
		_ = json.Unmarshal(want, &w)
		if !reflect.DeepEqual(out, w) {
			t.Fatalf("streamClean(%q) = %q; Clean = %q", body, got, want)
		}
	})
}
