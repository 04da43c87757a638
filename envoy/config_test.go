package envoy

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

var update = flag.Bool("update", false, "rewrite the rendered examples under examples/plain-envoy/")

// envoyBin returns the real Envoy binary; a missing binary fails the test (never skips).
func envoyBin(t *testing.T) string {
	t.Helper()
	bin, err := FindBinary()
	if err != nil {
		t.Fatalf("%v\nInstall it with: bash scripts/install-envoy.sh (called by make deps)", err)
	}
	return bin
}

// testTimeout bounds each wait on a real Envoy in these tests (its start, a validation run, a
// request through it). It is generous for a two-core machine busy with -race builds and other
// tests, where a start-up of 0.1-0.4 s has taken seconds; every wait ends on Envoy's own answer
// or exit, so a broken Envoy or bootstrap still fails at once.
const testTimeout = 2 * time.Minute

func testParams(mode BodyMode, failOpen bool) Params {
	p := Params{
		Mode:    mode,
		ExtProc: Endpoint{Host: "127.0.0.1", Port: 9002},
	}
	if failOpen {
		p.FailOpen = FailOpen
		p.DecodeFallback = []Endpoint{{Host: "127.0.0.1", Port: 8001}, {Host: "127.0.0.1", Port: 8002}}
	}
	return p
}

// variants are every valid (mode, failure mode) pair; full duplex is fail-closed only.
func variants() []Params {
	var ps []Params
	for _, m := range Modes() {
		ps = append(ps, testParams(m, FailClosed))
		if m != FullDuplex {
			ps = append(ps, testParams(m, FailOpen))
		}
	}
	return ps
}

func variantName(p Params) string {
	if p.FailOpen {
		return string(p.Mode) + "/fail_open"
	}
	return string(p.Mode) + "/fail_closed"
}

func TestEveryVariantPassesEnvoyValidate(t *testing.T) {
	bin := envoyBin(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel) // after the parallel subtests
	if v, err := BinaryVersion(ctx, bin); err != nil || v != Version {
		t.Fatalf("BinaryVersion(%s) = %q, %v; want %s (re-run scripts/install-envoy.sh)", bin, v, err, Version)
	}
	for _, p := range variants() {
		for _, dns := range []bool{false, true} {
			p := p
			name := variantName(p)
			if dns {
				// Production shape: DNS names make STRICT_DNS clusters, plus an access log.
				name += "/dns"
				p.ExtProc = Endpoint{Host: "condisagg.llm.svc", Port: 9002}
				if p.FailOpen {
					p.DecodeFallback = []Endpoint{{Host: "vllm-decode.llm.svc", Port: 8000}}
				}
				p.AccessLogPath = "/dev/stdout"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				path, err := WriteBootstrap(t.TempDir(), p)
				if err != nil {
					t.Fatal(err)
				}
				if err := Validate(ctx, bin, path); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// TestEnvoyValidateRejectsBrokenBootstrap proves the validation above can fail: one wrong enum
// value or one unknown field in a rendered bootstrap is refused by Envoy.
func TestEnvoyValidateRejectsBrokenBootstrap(t *testing.T) {
	bin := envoyBin(t)
	out, err := Render(testParams(Buffered, FailOpen))
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct{ old, new, want string }{
		"unknown_enum":      {"request_body_mode: BUFFERED", "request_body_mode: BUFFERD", "BUFFERD"},
		"unknown_field":     {"message_timeout: 2s", "message_timeout: 2s\n              mesage_timeout: 2s", "mesage_timeout"},
		"bad_route_cluster": {"route: {cluster: decode,", "route: {cluster: decodee,", "decodee"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			broken := bytes.Replace(out, []byte(c.old), []byte(c.new), 1)
			if bytes.Equal(broken, out) {
				t.Fatalf("rendered bootstrap has no %q", c.old)
			}
			path := filepath.Join(t.TempDir(), "broken.yaml")
			if err := os.WriteFile(path, broken, 0o644); err != nil {
				t.Fatal(err)
			}
			err := Validate(context.Background(), bin, path)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Validate(broken %s) = %v; want an error naming %q", name, err, c.want)
			}
		})
	}
}

func TestParamsValidateNamesEveryProblem(t *testing.T) {
	for _, c := range []struct {
		name string
		p    Params
		want []string
	}{
		{"unknown_mode", Params{Mode: "chunked", ExtProc: Endpoint{"127.0.0.1", 1}}, []string{`mode: "chunked"`}},
		{"full_duplex_fail_open", Params{Mode: FullDuplex, FailOpen: true, ExtProc: Endpoint{"127.0.0.1", 1},
			DecodeFallback: []Endpoint{{"127.0.0.1", 2}}}, []string{"fail_open: true is not allowed with full_duplex"}},
		{"missing_ext_proc", Params{}, []string{`ext_proc.host: ""`, "ext_proc.port: 0 is outside [1, 65535]"}},
		{"fail_open_without_fallback", Params{FailOpen: true, ExtProc: Endpoint{"127.0.0.1", 1}},
			[]string{"decode_fallback: [] must list at least one decode worker"}},
		{"bad_fallback_entry", Params{FailOpen: true, ExtProc: Endpoint{"127.0.0.1", 1},
			DecodeFallback: []Endpoint{{"127.0.0.1", 70000}, {"bad host", 1}}},
			[]string{"decode_fallback[0].port: 70000", `decode_fallback[1].host: "bad host"`}},
		{"listen_port_negative", Params{Proxy: Proxy{Listen: Endpoint{"127.0.0.1", -1}}, ExtProc: Endpoint{"127.0.0.1", 1}},
			[]string{"listen.port: -1 is outside [0, 65535]"}},
		{"tiny_timeout", Params{Proxy: Proxy{MessageTimeout: time.Microsecond}, ExtProc: Endpoint{"127.0.0.1", 1}},
			[]string{"message_timeout: 1µs is below 1ms"}},
		{"yaml_injection_in_host", Params{ExtProc: Endpoint{"x}, {y", 1}}, []string{`ext_proc.host: "x}, {y"`}},
		{"access_log_newline", Params{ExtProc: Endpoint{"127.0.0.1", 1}, Proxy: Proxy{AccessLogPath: "/tmp/a\nb"}},
			[]string{"access_log_path"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Render(c.p)
			if err == nil {
				t.Fatalf("Render(%+v) succeeded; want errors %q", c.p, c.want)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Render error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestParseEndpoint(t *testing.T) {
	for in, want := range map[string]Endpoint{
		"127.0.0.1:8000":    {"127.0.0.1", 8000},
		"[::1]:9":           {"::1", 9},
		"decode-0.llm:8000": {"decode-0.llm", 8000},
	} {
		got, err := ParseEndpoint(in)
		if err != nil || got != want || got.String() != in {
			t.Errorf("ParseEndpoint(%q) = %+v (%q), %v; want %+v", in, got, got.String(), err, want)
		}
	}
	for _, in := range []string{"127.0.0.1", "h:port", ""} {
		if _, err := ParseEndpoint(in); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%q", in)) {
			t.Errorf("ParseEndpoint(%q) error = %v; want one naming the input", in, err)
		}
	}
}

// TestRenderedStructure checks, in the parsed YAML, the fields the header contract and the
// failure-mode table depend on (envoy-extproc §4, §5).
func TestRenderedStructure(t *testing.T) {
	for _, p := range variants() {
		t.Run(variantName(p), func(t *testing.T) {
			out, err := Render(p)
			if err != nil {
				t.Fatal(err)
			}
			var doc map[string]any
			if err := yaml.Unmarshal(out, &doc); err != nil {
				t.Fatalf("rendered bootstrap is not YAML: %v", err)
			}
			hcm := dig(t, doc, "static_resources", "listeners", 0, "filter_chains", 0, "filters", 0, "typed_config")
			filters := dig(t, hcm, "http_filters").([]any)
			names := make([]string, len(filters))
			for i, f := range filters {
				names[i] = dig(t, f, "name").(string)
			}
			wantFilters := "envoy.filters.http.ext_proc,envoy.filters.http.router"
			if p.FailOpen {
				// The fail-open guard sits between ext_proc and the router.
				wantFilters = "envoy.filters.http.ext_proc,envoy.filters.http.lua,envoy.filters.http.router"
			}
			if got := strings.Join(names, ","); got != wantFilters {
				t.Errorf("http_filters = %s; want %s", got, wantFilters)
			}
			early := dig(t, hcm, "early_header_mutation_extensions", 0)
			if dig(t, early, "name") != "envoy.http.early_header_mutation.header_mutation" {
				t.Errorf("early header mutation = %v", early)
			}
			checkStripped(t, dig(t, early, "typed_config", "mutations").([]any))
			ext := dig(t, filters[0], "typed_config")
			if got := dig(t, ext, "failure_mode_allow"); got != p.FailOpen {
				t.Errorf("failure_mode_allow = %v; want %v", got, p.FailOpen)
			}
			if got := dig(t, ext, "message_timeout"); got != "2s" {
				t.Errorf("message_timeout = %v; want 2s", got)
			}
			if got := dig(t, ext, "allow_mode_override"); got != false {
				t.Errorf("allow_mode_override = %v; want false", got)
			}
			checkProcessingMode(t, p.Mode, dig(t, ext, "processing_mode").(map[string]any))
			if got := fmt.Sprint(dig(t, ext, "metadata_options", "receiving_namespaces", "untyped")); got != "[envoy.lb]" {
				t.Errorf("receiving_namespaces = %s; want [envoy.lb] (else Envoy drops the destination metadata)", got)
			}
			checkRoutes(t, p, dig(t, hcm, "route_config", "virtual_hosts", 0, "routes").([]any))
			checkClusters(t, p, dig(t, doc, "static_resources", "clusters").([]any))
		})
	}
}

func checkStripped(t *testing.T, muts []any) {
	t.Helper()
	var got []string
	for _, m := range muts {
		mm := m.(map[string]any)
		if r, ok := mm["remove"]; ok {
			got = append(got, r.(string))
		}
		if r, ok := mm["remove_on_match"]; ok {
			got = append(got, "prefix:"+dig(t, r, "key_matcher", "prefix").(string))
		}
	}
	want := append([]string{"prefix:x-condisagg-"}, StrippedHeaders()...)
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("header_mutation removes %v; want %v", got, want)
	}
}

func checkProcessingMode(t *testing.T, mode BodyMode, pm map[string]any) {
	t.Helper()
	want := map[BodyMode]map[string]any{
		Buffered: {"request_header_mode": "SEND", "request_body_mode": "BUFFERED",
			"response_header_mode": "SEND", "response_body_mode": "STREAMED"},
		Streamed: {"request_header_mode": "SEND", "request_body_mode": "STREAMED",
			"response_header_mode": "SEND", "response_body_mode": "STREAMED"},
		FullDuplex: {"request_header_mode": "SEND", "request_body_mode": "FULL_DUPLEX_STREAMED",
			"request_trailer_mode": "SEND", "response_header_mode": "SEND",
			"response_body_mode": "FULL_DUPLEX_STREAMED", "response_trailer_mode": "SEND"},
	}[mode]
	if fmt.Sprint(pm) != fmt.Sprint(want) {
		t.Errorf("processing_mode = %v; want %v", pm, want)
	}
}

func checkRoutes(t *testing.T, p Params, routes []any) {
	t.Helper()
	var got []string
	for _, r := range routes {
		desc := dig(t, r, "name").(string) + "->"
		if rr, ok := r.(map[string]any)["route"]; ok {
			desc += dig(t, rr, "cluster").(string)
			if dig(t, rr, "timeout") != "3600s" || dig(t, rr, "idle_timeout") != "900s" {
				t.Errorf("route %v: timeouts %v/%v; want 3600s/900s", desc, dig(t, rr, "timeout"), dig(t, rr, "idle_timeout"))
			}
			if _, retry := rr.(map[string]any)["retry_policy"]; retry {
				t.Errorf("route %v has a retry_policy (re-sends the prompt, double-books)", desc)
			}
		} else {
			desc += fmt.Sprint(dig(t, r, "direct_response", "status"))
		}
		if hs, ok := dig(t, r, "match").(map[string]any)["headers"]; ok {
			h := hs.([]any)[0]
			desc += fmt.Sprintf("[%s=%s]", dig(t, h, "name"), dig(t, h, "string_match", "exact"))
		}
		got = append(got, desc)
	}
	want := "prefill->prefill[x-condisagg-route=prefill] decode->decode[x-condisagg-route=decode] "
	if p.FailOpen {
		want += "fallback->decode_fallback"
	} else {
		want += "no_decision->503"
	}
	if strings.Join(got, " ") != want {
		t.Errorf("routes = %s; want %s", strings.Join(got, " "), want)
	}
}

func checkClusters(t *testing.T, p Params, clusters []any) {
	t.Helper()
	byName := map[string]any{}
	for _, c := range clusters {
		byName[dig(t, c, "name").(string)] = c
		if max := dig(t, c, "circuit_breakers", "thresholds", 0, "max_requests"); max != 10000 {
			t.Errorf("cluster %s: max_requests = %v; want 10000", dig(t, c, "name"), max)
		}
	}
	for _, name := range []string{"prefill", "decode"} {
		c := byName[name]
		if c == nil {
			t.Fatalf("no %s cluster", name)
		}
		if dig(t, c, "type") != "ORIGINAL_DST" || dig(t, c, "lb_policy") != "CLUSTER_PROVIDED" ||
			dig(t, c, "original_dst_lb_config", "use_http_header") != true ||
			dig(t, c, "original_dst_lb_config", "http_header_name") != "x-gateway-destination-endpoint" {
			t.Errorf("cluster %s is not ORIGINAL_DST on x-gateway-destination-endpoint: %v", name, c)
		}
	}
	if _, ok := byName["decode_fallback"]; ok != p.FailOpen {
		t.Errorf("decode_fallback cluster present = %v; want %v (only fail-open routes there)", ok, p.FailOpen)
	}
	ext := byName["condisagg"]
	if ext == nil {
		t.Fatal("no condisagg cluster")
	}
	if dig(t, ext, "health_checks", 0, "grpc_health_check", "service_name") != "envoy.service.ext_proc.v3.ExternalProcessor" {
		t.Errorf("condisagg cluster health check = %v", dig(t, ext, "health_checks"))
	}
	h2 := dig(t, ext, "typed_extension_protocol_options", "envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
		"explicit_http_config", "http2_protocol_options")
	if h2 == nil {
		t.Error("condisagg cluster does not speak HTTP/2")
	}
}

// dig walks a decoded YAML document by map keys and slice indexes, failing the test on a miss.
func dig(t *testing.T, v any, path ...any) any {
	t.Helper()
	for _, k := range path {
		switch key := k.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("dig %v: %q: not a map: %v", path, key, v)
			}
			if v, ok = m[key]; !ok {
				t.Fatalf("dig %v: no key %q in %v", path, key, m)
			}
		case int:
			s, ok := v.([]any)
			if !ok || key >= len(s) {
				t.Fatalf("dig %v: index %d: not a list that long: %v", path, key, v)
			}
			v = s[key]
		}
	}
	return v
}

// TestPlainEnvoyExamplesAreCurrent keeps the rendered production examples equal to what Render
// produces for the production parameters (go test -update rewrites them).
func TestPlainEnvoyExamplesAreCurrent(t *testing.T) {
	for file, p := range productionExamples() {
		out, err := Render(p)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join("examples", "plain-envoy", file)
		if *update {
			if err := os.WriteFile(path, out, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		have, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test ./envoy -run PlainEnvoyExamples -update)", err)
		}
		if !bytes.Equal(have, out) {
			t.Errorf("%s is stale: run go test ./envoy -run PlainEnvoyExamples -update", path)
		}
	}
}

// productionExamples are the plain-Envoy bootstraps for a Kubernetes namespace "llm".
func productionExamples() map[string]Params {
	base := Params{
		Proxy: Proxy{
			Listen:        Endpoint{Host: "0.0.0.0", Port: 8080},
			Admin:         Endpoint{Host: "127.0.0.1", Port: 9901},
			AccessLogPath: "/dev/stdout",
		},
		// The chart's headless Service of the router pods: every replica is a host.
		ExtProc:                   Endpoint{Host: "condisagg-pods.llm.svc.cluster.local", Port: 9002},
		ExtProcResolvesToReplicas: true,
	}
	buffered := base
	buffered.Mode, buffered.FailOpen = Buffered, FailOpen
	buffered.DecodeFallback = []Endpoint{{Host: "vllm-decode.llm.svc.cluster.local", Port: 8000}}
	duplex := base
	duplex.Mode, duplex.FailOpen = FullDuplex, FailClosed
	return map[string]Params{"bootstrap-buffered.yaml": buffered, "bootstrap-full-duplex.yaml": duplex}
}

func TestFindBinaryHonoursEnvoyBin(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "envoy")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ENVOY_BIN", fake)
	if got, err := FindBinary(); err != nil || got != fake {
		t.Errorf("FindBinary() with ENVOY_BIN = %q, %v; want %q", got, err, fake)
	}
	t.Setenv("ENVOY_BIN", filepath.Join(dir, "missing"))
	if _, err := FindBinary(); !errors.Is(err, ErrNoBinary) || !strings.Contains(err.Error(), "install-envoy.sh") {
		t.Errorf("FindBinary() with a missing ENVOY_BIN: err = %v; want ErrNoBinary naming install-envoy.sh", err)
	}
	t.Setenv("ENVOY_BIN", "")
	t.Setenv("ENVOY_VENV", dir)
	if got, err := FindBinary(); err != nil || got != fake {
		t.Errorf("FindBinary() with ENVOY_VENV = %q, %v; want %q", got, err, fake)
	}
	// A relative ENVOY_VENV is taken from the repository root (the package test runs in envoy/).
	t.Setenv("ENVOY_VENV", venvDir)
	root, _ := filepath.Abs("..")
	if got, err := FindBinary(); err != nil || got != filepath.Join(root, venvDir, "envoy") {
		t.Errorf("FindBinary() with ENVOY_VENV=%s = %q, %v; want it under %s", venvDir, got, err, root)
	}
}
