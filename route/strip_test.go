package route

import (
	"encoding/json"
	"reflect"
	"testing"
)

// TestStripMember: every top-level kv_transfer_params goes, escaped or duplicated, nested ones
// and look-alikes stay, and the result is the same JSON minus those members.
func TestStripMember(t *testing.T) {
	cases := []struct{ in, want string }{
		{`{"model":"m","prompt":"x"}`, `{"model":"m","prompt":"x"}`},
		{`{"model":"m","kv_transfer_params":{"remote_host":"10.0.0.9"},"prompt":"x"}`, `{"model":"m","prompt":"x"}`},
		{`{"kv_transfer_params":null}`, `{}`},
		{`{"model":"m", "kv_transfer_params" : {"a":[1,"}"]} }`, `{"model":"m" }`},
		{`{"kv_transfer_params":1,"model":"m"}`, `{"model":"m"}`},
		{`{"model":"m","kv\u005ftransfer_params":{"do_remote_prefill":true}}`, `{"model":"m"}`},
		{`{"a":1,"kv_transfer_params":2,"kv_transfer_params":3}`, `{"a":1}`},
		{`{"kv_transfer_params":2,"a":1,"kv_transfer_params":3}`, `{"a":1}`},
		{`{"messages":[{"kv_transfer_params":1}],"x":"kv_transfer_params"}`, `{"messages":[{"kv_transfer_params":1}],"x":"kv_transfer_params"}`},
		{`{"KV_TRANSFER_PARAMS":1}`, `{"KV_TRANSFER_PARAMS":1}`}, // the engine's keys are case-sensitive
	}
	for _, c := range cases {
		got, n := StripMember([]byte(c.in), FieldKVTransferParams)
		if string(got) != c.want {
			t.Errorf("StripMember(%s) = %s, want %s", c.in, got, c.want)
		}
		if (n > 0) != (c.in != c.want) || HasMember([]byte(c.in), FieldKVTransferParams) != (n > 0) {
			t.Errorf("StripMember(%s): removed %d, HasMember %v", c.in, n, HasMember([]byte(c.in), FieldKVTransferParams))
		}
		if !json.Valid(got) {
			t.Errorf("StripMember(%s) = %s: not valid JSON", c.in, got)
		}
	}
}

// FuzzStripMember: on any valid JSON object the result is valid JSON with the same members
// except kv_transfer_params, and no top-level kv_transfer_params is left.
func FuzzStripMember(f *testing.F) {
	f.Add([]byte(`{"model":"m","kv_transfer_params":{"x":1},"prompt":[1,2]}`))
	f.Add([]byte(`{"kv_transfer_params":1,"kv_transfer_params":2}`))
	f.Add([]byte(`{"kv\u005ftransfer_params":1 , "a" : [ ] }`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var in map[string]any
		if json.Unmarshal(body, &in) != nil {
			return
		}
		got, _ := StripMember(body, FieldKVTransferParams)
		var out map[string]any
		if err := json.Unmarshal(got, &out); err != nil {
			t.Fatalf("StripMember(%q) = %q: %v", body, got, err)
		}
		delete(in, FieldKVTransferParams)
		if _, ok := out[FieldKVTransferParams]; ok {
			t.Fatalf("StripMember(%q) left %s", body, FieldKVTransferParams)
		}
		if !reflect.DeepEqual(in, out) {
			t.Fatalf("StripMember(%q) = %q: members differ", body, got)
		}
	})
}
