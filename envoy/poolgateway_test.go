package envoy

import (
	"context"
	"strings"
	"testing"

	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/set_metadata/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/override_host/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/round_robin/v3"
	"gopkg.in/yaml.v3"
)

func poolParams(sel PoolSelection, subset bool) PoolGatewayParams {
	p := PoolGatewayParams{Selection: sel, EPP: Endpoint{Host: "127.0.0.1", Port: 9002}}
	if sel == SelectByMetadata {
		p.PoolEndpoints = []Endpoint{{Host: "10.0.0.11", Port: 8100}, {Host: "10.0.0.21", Port: 8000}}
	}
	if subset {
		p.SubsetHint = []string{"10.0.0.21:8000"}
	}
	return p
}

// TestPoolGatewayPassesEnvoyValidate: both selection styles, with and without a subset hint,
// fail-closed and fail-open, a DNS picker address and an access log, pass the real
// `envoy --mode validate`, and say what a GIE gateway configures: one route to the pool,
// full-duplex ext_proc with trailers, the envoy.lb namespaces forwarded and received, the pool
// cluster reading the header or the metadata.
func TestPoolGatewayPassesEnvoyValidate(t *testing.T) {
	bin := envoyBin(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	for _, sel := range []PoolSelection{SelectByHeader, SelectByMetadata} {
		for _, subset := range []bool{false, true} {
			for _, open := range []bool{false, true} {
				p := poolParams(sel, subset)
				p.FailOpen = open
				name := string(sel)
				if subset {
					name += "/subset"
				}
				if open {
					name += "/fail_open"
					p.EPP.Host = "condisagg.llm.svc"
					p.AccessLogPath = "/dev/stdout"
				}
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					path, err := WritePoolGateway(t.TempDir(), p)
					if err != nil {
						t.Fatal(err)
					}
					if err := Validate(ctx, bin, path); err != nil {
						t.Fatal(err)
					}
					out, _ := RenderPoolGateway(p)
					checkPoolGateway(t, out, p)
				})
			}
		}
	}
}

func checkPoolGateway(t *testing.T, out []byte, p PoolGatewayParams) {
	t.Helper()
	b := yamlToBootstrap(t, out)
	if n := validateDeep(t, b); n < 4 {
		t.Errorf("validated %d typed configs", n)
	}
	var doc struct {
		StaticResources struct {
			Listeners []struct {
				FilterChains []struct {
					Filters []struct {
						TypedConfig struct {
							RouteConfig struct {
								VirtualHosts []struct {
									Routes []map[string]any `yaml:"routes"`
								} `yaml:"virtual_hosts"`
							} `yaml:"route_config"`
							HTTPFilters []struct {
								Name        string         `yaml:"name"`
								TypedConfig map[string]any `yaml:"typed_config"`
							} `yaml:"http_filters"`
						} `yaml:"typed_config"`
					} `yaml:"filters"`
				} `yaml:"filter_chains"`
			} `yaml:"listeners"`
			Clusters []map[string]any `yaml:"clusters"`
		} `yaml:"static_resources"`
	}
	if err := yaml.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	hcm := doc.StaticResources.Listeners[0].FilterChains[0].Filters[0].TypedConfig
	routes := hcm.RouteConfig.VirtualHosts[0].Routes
	if len(routes) != 1 || routes[0]["route"].(map[string]any)["cluster"] != "inference_pool" {
		t.Errorf("routes %v; want one route to inference_pool", routes)
	}
	var names []string
	var extproc map[string]any
	for _, f := range hcm.HTTPFilters {
		names = append(names, f.Name)
		if f.Name == "envoy.filters.http.ext_proc" {
			extproc = f.TypedConfig
		}
	}
	want := "envoy.filters.http.ext_proc,envoy.filters.http.router"
	if len(p.SubsetHint) > 0 {
		want = "envoy.filters.http.set_metadata," + want
	}
	if got := strings.Join(names, ","); got != want {
		t.Errorf("http filters %s; want %s", got, want)
	}
	mode := extproc["processing_mode"].(map[string]any)
	for k, v := range map[string]string{"request_body_mode": "FULL_DUPLEX_STREAMED", "response_body_mode": "FULL_DUPLEX_STREAMED",
		"request_trailer_mode": "SEND", "response_trailer_mode": "SEND"} {
		if mode[k] != v {
			t.Errorf("processing_mode.%s = %v; want %s", k, mode[k], v)
		}
	}
	if extproc["failure_mode_allow"] != p.FailOpen {
		t.Errorf("failure_mode_allow = %v; want %v", extproc["failure_mode_allow"], p.FailOpen)
	}
	md := extproc["metadata_options"].(map[string]any)
	if got := md["receiving_namespaces"].(map[string]any)["untyped"]; len(got.([]any)) != 1 || got.([]any)[0] != "envoy.lb" {
		t.Errorf("receiving_namespaces %v; want [envoy.lb]", got)
	}
	pool := doc.StaticResources.Clusters[0]
	switch p.WithDefaults().Selection {
	case SelectByHeader:
		if pool["type"] != "ORIGINAL_DST" || pool["original_dst_lb_config"].(map[string]any)["http_header_name"] != "x-gateway-destination-endpoint" {
			t.Errorf("header pool cluster %v", pool)
		}
	case SelectByMetadata:
		if pool["type"] != "STATIC" || !strings.Contains(string(out), "metadata: {key: envoy.lb, path: [{key: x-gateway-destination-endpoint}]}") {
			t.Errorf("metadata pool cluster %v", pool)
		}
	}
}

// TestPoolGatewayParamsNameEveryProblem: bad parameters are refused, every one named.
func TestPoolGatewayParamsNameEveryProblem(t *testing.T) {
	_, err := RenderPoolGateway(PoolGatewayParams{Selection: SelectByMetadata, SubsetHint: []string{"10.0.0.1"},
		PoolEndpoints: []Endpoint{{Host: "pods.llm.svc", Port: 8000}}, Proxy: Proxy{MaxRequests: -1}})
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"epp.host", "subset_hint[0]", "pool_endpoints[0].host", "max_requests"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	if _, err := RenderPoolGateway(PoolGatewayParams{Selection: "sticky", EPP: Endpoint{Host: "127.0.0.1", Port: 1}}); err == nil ||
		!strings.Contains(err.Error(), "selection") {
		t.Fatalf("unknown selection: %v", err)
	}
	if _, err := RenderPoolGateway(PoolGatewayParams{Selection: SelectByMetadata, EPP: Endpoint{Host: "127.0.0.1", Port: 1}}); err == nil ||
		!strings.Contains(err.Error(), "pool_endpoints") {
		t.Fatalf("metadata without pool endpoints: %v", err)
	}
}

func TestParsePoolAccessLog(t *testing.T) {
	got := ParsePoolAccessLog([]byte("noise\npool path=/v1/chat/completions code=200 upstream=127.0.0.1:8000 header=127.0.0.1:8000 metadata=127.0.0.1:8000 decode=127.0.0.1:8000\n"))
	if len(got) != 1 || got[0].Code != "200" || got[0].Metadata != "127.0.0.1:8000" || got[0].Path != "/v1/chat/completions" {
		t.Fatalf("%+v", got)
	}
}
