package route

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// TestCleanPassesBodiesWithoutNames: a body that cannot spell an engine-control key (none of the
// names, no \u escape, no NUL byte) passes unread, even if it is not JSON (a form upload).
func TestCleanPassesBodiesWithoutNames(t *testing.T) {
	for _, in := range []string{`[1]`, `{"a":`, ``, "--b\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nRIFF"} {
		if got, cut, err := Clean([]byte(in)); err != nil || string(got) != in || cut != nil {
			t.Errorf("Clean(%q) = %q, %v, %v; want it unchanged", in, got, cut, err)
		}
	}
}

// TestClean: every top-level engine-control member goes (kv_transfer_params, ec_transfer_params,
// vllm_xargs), escaped or duplicated, in bodies the engine reads (a BOM, NaN); nested ones and
// look-alikes stay; a body that cannot be read is refused (issue 23 item 1).
func TestClean(t *testing.T) {
	cases := []struct{ in, want, cut string }{
		{`{"model":"m","prompt":"x"}`, `{"model":"m","prompt":"x"}`, ""},
		{`{"model":"m","kv_transfer_params":{"remote_host":"10.0.0.9"},"prompt":"x"}`, `{"model":"m","prompt":"x"}`, "kv_transfer_params"},
		{`{"kv_transfer_params":null}`, `{}`, "kv_transfer_params"},
		{`{"model":"m", "kv_transfer_params" : {"a":[1,"}"]} }`, `{"model":"m" }`, "kv_transfer_params"},
		{`{"kv_transfer_params":1,"model":"m"}`, `{"model":"m"}`, "kv_transfer_params"},
		{`{"model":"m","kv\u005ftransfer_params":{"do_remote_prefill":true}}`, `{"model":"m"}`, "kv_transfer_params"},
		{`{"a":1,"kv_transfer_params":2,"kv_transfer_params":3}`, `{"a":1}`, "kv_transfer_params,kv_transfer_params"},
		{`{"kv_transfer_params":2,"a":1,"kv_transfer_params":3}`, `{"a":1}`, "kv_transfer_params,kv_transfer_params"},
		{`{"messages":[{"kv_transfer_params":1}],"x":"kv_transfer_params"}`, `{"messages":[{"kv_transfer_params":1}],"x":"kv_transfer_params"}`, ""},
		{`{"KV_TRANSFER_PARAMS":1}`, `{"KV_TRANSFER_PARAMS":1}`, ""}, // the engine's keys are case-sensitive
		{`{"input":"x","ec_transfer_params":{},"vllm_xargs":{"kv_cache_report_mode":"full"}}`, `{"input":"x"}`, "ec_transfer_params,vllm_xargs"},
		{"\xef\xbb\xbf{\"kv_transfer_params\":{},\"t\":NaN}", "\xef\xbb\xbf{\"t\":NaN}", "kv_transfer_params"},
		{`{"t":Infinity,"kv_transfer_params":{}}`, `{"t":Infinity}`, "kv_transfer_params"},
	}
	for _, c := range cases {
		got, cut, err := Clean([]byte(c.in))
		if err != nil || string(got) != c.want || strings.Join(cut, ",") != c.cut {
			t.Errorf("Clean(%q) = %q, %v, %v; want %q, %s", c.in, got, cut, err, c.want, c.cut)
		}
	}
	for _, bad := range []string{`[{"kv_transfer_params":1}]`, `{"vllm_xargs":`, "{\x00\"\x00", `{"a":"\u0041"}{}`,
		`{"kv_transfer_params":{}} x`, "--b\r\nContent-Disposition: form-data; name=\"vllm_xargs\"\r\n\r\n{}"} {
		if got, _, err := Clean([]byte(bad)); !errors.Is(err, ErrInvalidBody) {
			t.Errorf("Clean(%q) = %q, %v; want ErrInvalidBody", bad, got, err)
		}
	}
}

// FuzzClean: on any valid JSON object the result is valid JSON with the same members except
// the engine-control ones, and none of those is left at the top level.
func FuzzClean(f *testing.F) {
	f.Add([]byte(`{"model":"m","kv_transfer_params":{"x":1},"prompt":[1,2]}`))
	f.Add([]byte(`{"kv_transfer_params":1,"vllm_xargs":2,"ec_transfer_params":3}`))
	f.Add([]byte(`{"kv\u005ftransfer_params":1 , "a" : [ ] }`))
	f.Add([]byte("\xef\xbb\xbf{\"kv_transfer_params\":1}"))
	f.Fuzz(func(t *testing.T, body []byte) {
		got, _, err := Clean(body)
		var in map[string]any
		if json.Unmarshal(body, &in) != nil || in == nil {
			return
		}
		if err != nil {
			if !strings.ContainsAny(string(body), "\x00\x01\x02\x03\x04\x05\x06\x07\x08\x0b\x0c\x0e\x0f") {
				t.Logf("Clean(%q) refused a body encoding/json reads: %v", body, err)
			}
			return
		}
		var out map[string]any
		if err := json.Unmarshal(got, &out); err != nil {
			t.Fatalf("Clean(%q) = %q: %v", body, got, err)
		}
		for _, k := range EngineControlFields() {
			delete(in, k)
			if _, ok := out[k]; ok {
				t.Fatalf("Clean(%q) left %s", body, k)
			}
		}
		if !reflect.DeepEqual(in, out) {
			t.Fatalf("Clean(%q) = %q: members differ", body, got)
		}
	})
}
