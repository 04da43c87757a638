package sidecar

import (
	"context"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
)

func TestCanonicalHostPort(t *testing.T) {
	cases := []struct{ in, want string }{
		{"10.0.0.1:8000", "10.0.0.1:8000"},
		{"[::1]:8000", "[::1]:8000"},
		{"[0:0:0:0:0:0:0:1]:8000", "[::1]:8000"},
		{"[2001:DB8::1]:80", "[2001:db8::1]:80"},
		{"Decode-0.vllm.svc:8000", "decode-0.vllm.svc:8000"},
		{"10.0.0.1:08000", ""},
		{"10.0.0.1:+80", ""},
		{"10.0.0.1:0", ""},
		{"10.0.0.1:65536", ""},
		{"10.0.0.1", ""},
		{":8000", ""},
		{"[::ffff:10.0.0.1]:8000", ""},
		{"[fe80::1%eth0]:8000", ""},
		{"a@10.0.0.1:8000", ""},
		{"10.0.0.1:8000/x", ""},
		{"http://10.0.0.1:8000", ""},
		{"host.:8000", ""},
		{"ho st:8000", ""},
		{"::1:8000", ""},
	}
	for _, tc := range cases {
		got, err := canonicalHostPort(tc.in)
		if (err == nil) != (tc.want != "") || got != tc.want {
			t.Errorf("canonicalHostPort(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestNewAllowlist_Errors(t *testing.T) {
	_, err := NewAllowlist([]string{"10.0.0.1:8000", "bad", "10.0.0.2:99999"})
	if err == nil || !strings.Contains(err.Error(), `allow[1]: "bad"`) || !strings.Contains(err.Error(), `allow[2]: "10.0.0.2:99999"`) {
		t.Fatalf("err = %v", err)
	}
	if _, err := NewAllowlist(nil); err == nil {
		t.Fatal("empty allowlist accepted")
	}
}

// fakeResolver answers from a table; a missing name fails.
type fakeResolver map[string][]string

func (f fakeResolver) LookupHost(_ context.Context, host string) ([]string, error) {
	if a, ok := f[host]; ok {
		return a, nil
	}
	return nil, errors.New("no such host " + host)
}

func TestAllowlist_Resolve(t *testing.T) {
	a, err := NewAllowlist([]string{"decode.svc:8000", "10.0.0.9:8000", "gone.svc:1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := a.Allowed("10.0.0.21:8000"); ok {
		t.Fatal("resolved address allowed before Resolve")
	}
	err = a.Resolve(context.Background(), fakeResolver{"decode.svc": {"10.0.0.21", "10.0.0.22", "2001:db8::5"}})
	if err == nil || !strings.Contains(err.Error(), "gone.svc") {
		t.Fatalf("resolve error %v, want one naming gone.svc", err)
	}
	for _, hp := range []string{"10.0.0.21:8000", "10.0.0.22:8000", "[2001:db8::5]:8000", "decode.svc:8000", "DECODE.svc:8000", "10.0.0.9:8000"} {
		if _, ok := a.Allowed(hp); !ok {
			t.Errorf("%s not allowed", hp)
		}
	}
	for _, hp := range []string{"10.0.0.21:8001", "10.0.0.23:8000"} {
		if _, ok := a.Allowed(hp); ok {
			t.Errorf("%s allowed", hp)
		}
	}
	// A later resolution replaces the earlier addresses.
	if err := a.Resolve(context.Background(), fakeResolver{"decode.svc": {"10.0.0.30"}, "gone.svc": {"10.0.0.31"}}); err != nil {
		t.Fatal(err)
	}
	if _, ok := a.Allowed("10.0.0.21:8000"); ok {
		t.Error("stale resolved address still allowed")
	}
	if _, ok := a.Allowed("10.0.0.30:8000"); !ok {
		t.Error("new resolved address not allowed")
	}
}

func TestParseWorkerEndpoints(t *testing.T) {
	data, err := os.ReadFile("testdata/workers.yaml")
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseWorkerEndpoints(data)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"10.0.0.11:8000", "10.0.0.21:8000", "vllm-decode-1.llm.svc:8000"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if _, err := ParseWorkerEndpoints([]byte("workers:\n  - {name: d, role: decode}\n")); err == nil || !strings.Contains(err.Error(), `workers[0] (name "d")`) {
		t.Fatalf("missing endpoint: err = %v", err)
	}
	if _, err := ParseWorkerEndpoints([]byte("model: {}\n")); err == nil {
		t.Fatal("no workers accepted")
	}
	if _, err := ParseWorkerEndpoints([]byte("workers: [")); err == nil {
		t.Fatal("bad YAML accepted")
	}
}

func TestConfigValidate(t *testing.T) {
	if err := (Config{}).Validate(); err != nil {
		t.Fatalf("zero config: %v", err)
	}
	err := Config{DefaultDecodeHost: "x", PrefillTimeout: -1, MaxAttempts: 11, Fallback: 7, MaxBodyBytes: -5}.Validate()
	for _, want := range []string{"default_decode_host", "prefill_timeout: -1ns must be > 0", "max_attempts: 11 is outside [1, 10]", "fallback: 7", "max_body_bytes: -5 must be >= 1"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate error %v lacks %q", err, want)
		}
	}
}
