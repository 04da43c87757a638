package envoy

import (
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// FuzzParseEndpoint: any input either fails with an error naming it or yields an endpoint whose
// String form parses back to the same endpoint.
func FuzzParseEndpoint(f *testing.F) {
	for _, s := range []string{"127.0.0.1:8000", "[::1]:9", "decode-0.llm.svc:8000", "h:", ":1", "[::1]", "a:b:c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		e, err := ParseEndpoint(s)
		if err != nil {
			return
		}
		back, err := ParseEndpoint(e.String())
		if err != nil || back != e {
			t.Fatalf("ParseEndpoint(%q) = %+v; String %q parses to %+v, %v", s, e, e.String(), back, err)
		}
	})
}

// FuzzRenderHosts: whatever host strings arrive (from flags or config files), Render either
// refuses them or produces YAML in which each host is exactly one scalar, unchanged, so no input
// can inject configuration.
func FuzzRenderHosts(f *testing.F) {
	f.Add("127.0.0.1", "10.0.0.1", "/dev/stdout")
	f.Add("condisagg.llm.svc", "::1", "/tmp/access.log")
	f.Add("x}, {y: 1", "a\nb", "p\"q")
	f.Fuzz(func(t *testing.T, extProcHost, fallbackHost, logPath string) {
		p := Params{FailOpen: true, ExtProc: Endpoint{extProcHost, 9002},
			DecodeFallback: []Endpoint{{fallbackHost, 8000}}, Proxy: Proxy{AccessLogPath: logPath}}
		out, err := Render(p)
		if err != nil {
			return
		}
		var doc map[string]any
		if err := yaml.Unmarshal(out, &doc); err != nil {
			t.Fatalf("Render(%q, %q, %q) is not YAML: %v", extProcHost, fallbackHost, logPath, err)
		}
		clusters := dig(t, doc, "static_resources", "clusters").([]any)
		got := map[string]any{}
		for _, c := range clusters {
			if la, ok := c.(map[string]any)["load_assignment"]; ok {
				got[dig(t, c, "name").(string)] = dig(t, la, "endpoints", 0, "lb_endpoints", 0, "endpoint", "address", "socket_address", "address")
			}
		}
		if got["condisagg"] != extProcHost || got["decode_fallback"] != fallbackHost {
			t.Fatalf("hosts %q, %q rendered as %v", extProcHost, fallbackHost, got)
		}
		if logPath != "" && !strings.Contains(string(out), "envoy.access_loggers.file") {
			t.Fatalf("access log %q not rendered", logPath)
		}
	})
}
