package envoy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// loadObjects decodes every YAML document of a Kubernetes manifest.
func loadObjects(t *testing.T, path string) []map[string]any {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	var objs []map[string]any
	for {
		var obj map[string]any
		err := dec.Decode(&obj)
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatalf("%s: document %d: %v", path, len(objs)+1, err)
		}
		if obj != nil {
			objs = append(objs, obj)
		}
	}
}

// object returns the object of the given kind and name, failing the test if there is none.
func object(t *testing.T, objs []map[string]any, kind, name string) map[string]any {
	t.Helper()
	for _, o := range objs {
		if o["kind"] == kind && dig(t, o, "metadata", "name") == name {
			return o
		}
	}
	t.Fatalf("no %s %q in the manifest", kind, name)
	return nil
}

// servicePort returns the port entry of Service name with the given port number.
func servicePort(t *testing.T, objs []map[string]any, name string, port int) map[string]any {
	t.Helper()
	for _, p := range dig(t, object(t, objs, "Service", name), "spec", "ports").([]any) {
		if dig(t, p, "port") == port {
			return p.(map[string]any)
		}
	}
	t.Fatalf("Service %s has no port %d", name, port)
	return nil
}

// reference is the recommended plain-Envoy bootstrap (Buffered, fail-open), decoded, with
// accessors for the pieces the control-plane examples must reproduce.
type reference struct {
	doc map[string]any
	t   *testing.T
}

func loadReference(t *testing.T) reference {
	t.Helper()
	return loadReferenceFor(t, testParams(Buffered, FailOpen))
}

// loadReplicaReference is the reference with a second condisagg replica: its condisagg cluster
// carries the outlier detection and its ext_proc filter the retry policy of several replicas,
// which the control-plane examples reproduce for the Service's pods.
func loadReplicaReference(t *testing.T) reference {
	t.Helper()
	p := testParams(Buffered, FailOpen)
	p.ExtProcReplicas = []Endpoint{{Host: "127.0.0.2", Port: 9002}}
	return loadReferenceFor(t, p)
}

func loadReferenceFor(t *testing.T, p Params) reference {
	t.Helper()
	out, err := Render(p)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	return reference{doc, t}
}

func (r reference) hcm() map[string]any {
	return dig(r.t, r.doc, "static_resources", "listeners", 0, "filter_chains", 0, "filters", 0, "typed_config").(map[string]any)
}

func (r reference) extProc() map[string]any {
	return dig(r.t, r.hcm(), "http_filters", 0, "typed_config").(map[string]any)
}

func (r reference) earlyMutations() []any {
	return dig(r.t, r.hcm(), "early_header_mutation_extensions", 0, "typed_config", "mutations").([]any)
}

func (r reference) cluster(name string) map[string]any {
	for _, c := range dig(r.t, r.doc, "static_resources", "clusters").([]any) {
		if dig(r.t, c, "name") == name {
			return c.(map[string]any)
		}
	}
	r.t.Fatalf("reference bootstrap has no cluster %s", name)
	return nil
}

// without returns a shallow copy of m lacking the given keys.
func without(m map[string]any, keys ...string) map[string]any {
	c := make(map[string]any, len(m))
	for k, v := range m {
		if !slices.Contains(keys, k) {
			c[k] = v
		}
	}
	return c
}

// writeAndValidate writes a bootstrap document and runs the real `envoy --mode validate` on it
// and the go-control-plane validators.
func writeAndValidate(t *testing.T, doc map[string]any) {
	t.Helper()
	out, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "bootstrap.yaml")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Validate(context.Background(), envoyBin(t), path); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	validateDeep(t, yamlToBootstrap(t, out))
}

// istioBaseBootstrap is the part of an Istio ingress gateway's config the EnvoyFilter patches
// land in: an HCM whose virtual host carries the VirtualService route, a router filter, and the
// outbound clusters Istio makes for the Services.
func istioBaseBootstrap(vhost, fallbackCluster, extProcCluster string) map[string]any {
	cluster := func(name, host string, port int, h2 bool) map[string]any {
		c := map[string]any{
			"name": name, "type": "STRICT_DNS", "connect_timeout": "1s",
			"load_assignment": map[string]any{"cluster_name": name, "endpoints": []any{map[string]any{
				"lb_endpoints": []any{map[string]any{"endpoint": map[string]any{"address": map[string]any{
					"socket_address": map[string]any{"address": host, "port_value": port}}}}}}}},
		}
		if h2 {
			c["typed_extension_protocol_options"] = map[string]any{"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": map[string]any{
				"@type":                "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
				"explicit_http_config": map[string]any{"http2_protocol_options": map[string]any{}}}}
		}
		return c
	}
	return map[string]any{"static_resources": map[string]any{
		"listeners": []any{map[string]any{
			"name":    "0.0.0.0_8080",
			"address": map[string]any{"socket_address": map[string]any{"address": "0.0.0.0", "port_value": 8080}},
			"filter_chains": []any{map[string]any{"filters": []any{map[string]any{
				"name": "envoy.filters.network.http_connection_manager",
				"typed_config": map[string]any{
					"@type":       "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
					"stat_prefix": "outbound_0.0.0.0_8080",
					"route_config": map[string]any{"name": "http.8080", "virtual_hosts": []any{map[string]any{
						"name": vhost, "domains": []any{strings.Split(vhost, ":")[0]},
						"routes": []any{map[string]any{"name": "fallback", "match": map[string]any{"prefix": "/"},
							"route": map[string]any{"cluster": fallbackCluster, "timeout": "3600s"}}},
					}}},
					"http_filters": []any{map[string]any{"name": "envoy.filters.http.router", "typed_config": map[string]any{
						"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}},
				},
			}}}},
		}},
		"clusters": []any{
			cluster(fallbackCluster, "vllm-decode.llm.svc.cluster.local", 8000, false),
			cluster(extProcCluster, "condisagg.llm.svc.cluster.local", 9002, true),
		},
	}}
}

// applyIstioPatches applies the EnvoyFilter's configPatches to base the way Istio does for the
// operations the example uses, failing on any other.
func applyIstioPatches(t *testing.T, base map[string]any, patches []any) {
	t.Helper()
	hcm := dig(t, base, "static_resources", "listeners", 0, "filter_chains", 0, "filters", 0, "typed_config").(map[string]any)
	vhost := dig(t, hcm, "route_config", "virtual_hosts", 0).(map[string]any)
	sr := base["static_resources"].(map[string]any)
	for i, p := range patches {
		applyTo, op := dig(t, p, "applyTo"), dig(t, p, "patch", "operation")
		value := dig(t, p, "patch", "value").(map[string]any)
		if dig(t, p, "match", "context") != "GATEWAY" {
			t.Errorf("patch %d: match.context = %v; want GATEWAY", i, dig(t, p, "match", "context"))
		}
		switch fmt.Sprint(applyTo, " ", op) {
		case "NETWORK_FILTER MERGE":
			for k, v := range value["typed_config"].(map[string]any) {
				hcm[k] = v
			}
		case "HTTP_FILTER INSERT_BEFORE":
			sub := dig(t, p, "match", "listener", "filterChain", "filter", "subFilter", "name")
			filters := hcm["http_filters"].([]any)
			at := slices.IndexFunc(filters, func(f any) bool { return dig(t, f, "name") == sub })
			if at < 0 {
				t.Fatalf("patch %d: no filter %v to insert before", i, sub)
			}
			hcm["http_filters"] = slices.Insert(filters, at, any(value))
		case "CLUSTER ADD":
			sr["clusters"] = append(sr["clusters"].([]any), value)
		case "HTTP_ROUTE INSERT_FIRST":
			if got := dig(t, p, "match", "routeConfiguration", "vhost", "name"); got != vhost["name"] {
				t.Errorf("patch %d: vhost %v; want %v", i, got, vhost["name"])
			}
			vhost["routes"] = append([]any{value}, vhost["routes"].([]any)...)
		case "VIRTUAL_HOST MERGE":
			for k, v := range value {
				vhost[k] = v
			}
		default:
			t.Fatalf("patch %d: %v %v is not modelled by this test", i, applyTo, op)
		}
	}
}

// TestIstioExample applies the EnvoyFilter patches to a minimal gateway config standing in for
// Istio's, runs the real `envoy --mode validate` on the result, and checks that the patches say
// what the reference bootstrap says and point at the Services of the same manifest.
func TestIstioExample(t *testing.T) {
	objs := loadObjects(t, filepath.Join("examples", "istio", "condisagg-istio.yaml"))
	ref := loadReference(t)
	ef := object(t, objs, "EnvoyFilter", "condisagg")
	patches := dig(t, ef, "spec", "configPatches").([]any)

	// Cross-object names: Istio's outbound cluster of the condisagg Service, the gateway's vhost.
	extProcCluster := "outbound|9002||condisagg.llm.svc.cluster.local"
	if ap := servicePort(t, objs, "condisagg", 9002)["appProtocol"]; ap != "grpc" {
		t.Errorf("Service condisagg port 9002 appProtocol = %v; want grpc (HTTP/2 for envoy_grpc)", ap)
	}
	gwHost := dig(t, object(t, objs, "Gateway", "llm"), "spec", "servers", 0, "hosts", 0)
	vhost := fmt.Sprintf("%v:%v", gwHost, dig(t, object(t, objs, "Gateway", "llm"), "spec", "servers", 0, "port", "number"))
	vs := object(t, objs, "VirtualService", "llm")
	fallbackHost := dig(t, vs, "spec", "http", 0, "route", 0, "destination", "host").(string)
	servicePort(t, objs, strings.Split(fallbackHost, ".")[0], dig(t, vs, "spec", "http", 0, "route", 0, "destination", "port", "number").(int))

	base := istioBaseBootstrap(vhost, "outbound|8000||"+fallbackHost, extProcCluster)
	applyIstioPatches(t, base, patches)
	hcm := dig(t, base, "static_resources", "listeners", 0, "filter_chains", 0, "filters", 0, "typed_config").(map[string]any)

	// The ext_proc filter equals the reference's except for the cluster name.
	ext := dig(t, hcm, "http_filters", 0, "typed_config").(map[string]any)
	if got := dig(t, ext, "grpc_service", "envoy_grpc", "cluster_name"); got != extProcCluster {
		t.Errorf("ext_proc cluster = %v; want %s", got, extProcCluster)
	}
	if !reflect.DeepEqual(without(ext, "grpc_service"), without(ref.extProc(), "grpc_service")) {
		t.Errorf("Istio ext_proc filter differs from the reference:\n got %v\nwant %v", without(ext, "grpc_service"), without(ref.extProc(), "grpc_service"))
	}
	if got := dig(t, hcm, "early_header_mutation_extensions", 0, "typed_config", "mutations"); !reflect.DeepEqual(got, ref.earlyMutations()) {
		t.Errorf("Istio early header mutations = %v; want %v", got, ref.earlyMutations())
	}
	checkGuardAndPaths(t, hcm, ref)
	if got := dig(t, hcm, "route_config", "virtual_hosts", 0, "request_body_buffer_limit"); got != DefaultMaxBodyBytes {
		t.Errorf("Istio request_body_buffer_limit = %v; want %d, condisagg's default max_body_bytes", got, DefaultMaxBodyBytes)
	}
	clusters := dig(t, base, "static_resources", "clusters").([]any)
	for _, name := range []string{"prefill", "decode"} {
		c := clusters[slices.IndexFunc(clusters, func(c any) bool { return dig(t, c, "name") == "condisagg-"+name })]
		if !reflect.DeepEqual(without(c.(map[string]any), "name"), without(ref.cluster(name), "name")) {
			t.Errorf("Istio cluster condisagg-%s = %v; want the reference's %v", name, c, ref.cluster(name))
		}
	}
	routes := dig(t, hcm, "route_config", "virtual_hosts", 0, "routes").([]any)
	var order []string
	for _, r := range routes {
		order = append(order, fmt.Sprintf("%v->%v", dig(t, r, "name"), dig(t, r, "route", "cluster")))
	}
	want := "condisagg-prefill->condisagg-prefill condisagg-decode->condisagg-decode fallback->outbound|8000||" + fallbackHost
	if strings.Join(order, " ") != want {
		t.Errorf("route order after patching = %s; want %s", strings.Join(order, " "), want)
	}
	checkIstioFailover(t, objs, ext, clusters[1].(map[string]any), strings.TrimPrefix(extProcCluster, "outbound|9002||"))
	writeAndValidate(t, base)
}

// checkIstioFailover: the DestinationRule of the ext_proc Service, translated as Istio does
// (applyOutlierDetection) onto the outbound cluster extProc, and the EnvoyFilter's ext_proc
// retry policy are the reference's settings for several replicas.
func checkIstioFailover(t *testing.T, objs []map[string]any, ext, extProc map[string]any, host string) {
	t.Helper()
	replicas := loadReplicaReference(t)
	var dr map[string]any
	for _, o := range objs {
		if o["kind"] == "DestinationRule" && dig(t, o, "spec", "host") == host {
			dr = o
		}
	}
	if dr == nil {
		t.Fatalf("no DestinationRule for %s, the ext_proc cluster's Service", host)
	}
	od := dig(t, dr, "spec", "trafficPolicy", "outlierDetection").(map[string]any)
	out := map[string]any{"enforcing_success_rate": 0}
	for k, v := range od {
		switch k {
		case "interval":
			out["interval"] = v
		case "baseEjectionTime":
			out["base_ejection_time"] = v
		case "maxEjectionPercent":
			if v.(int) >= 100 {
				// Istio sets healthy_panic_threshold 0: with every host ejected nothing is sent.
				t.Errorf("maxEjectionPercent %v would let the last replica be ejected", v)
			}
			out["max_ejection_percent"] = v
		case "splitExternalLocalOriginErrors", "consecutiveLocalOriginFailures":
		default:
			t.Errorf("DestinationRule outlierDetection.%s is not modelled by this test", k)
		}
	}
	if od["splitExternalLocalOriginErrors"] == true {
		out["split_external_local_origin_errors"] = true
		out["enforcing_local_origin_success_rate"] = 0
		if n, _ := od["consecutiveLocalOriginFailures"].(int); n > 0 {
			out["consecutive_local_origin_failure"] = n
			out["enforcing_consecutive_local_origin_failure"] = 100
		}
	}
	extProc["outlier_detection"] = out
	extProc["common_lb_config"] = map[string]any{"healthy_panic_threshold": map[string]any{"value": 0}}
	want := maps.Clone(dig(t, replicas.cluster("condisagg"), "outlier_detection").(map[string]any))
	if _, ok := want["interval"]; !ok {
		want["interval"] = "10s" // Envoy's default
	}
	for k, v := range want {
		if out[k] != v {
			t.Errorf("DestinationRule translates to outlier_detection.%s = %v; want the reference's %v", k, out[k], v)
		}
	}
	got := dig(t, ext, "grpc_service", "retry_policy")
	if ref := dig(t, replicas.extProc(), "grpc_service", "retry_policy"); !reflect.DeepEqual(got, ref) {
		t.Errorf("EnvoyFilter ext_proc retry_policy = %v; want the reference's %v", got, ref)
	}
}

// checkGuardAndPaths: the patched HCM filters are ext_proc, the reference's Lua fail-open guard
// (the same script), router; and it reads paths as the reference bootstrap does.
func checkGuardAndPaths(t *testing.T, hcm map[string]any, ref reference) {
	t.Helper()
	var names []string
	for _, f := range hcm["http_filters"].([]any) {
		names = append(names, dig(t, f, "name").(string))
	}
	if got, want := strings.Join(names, ","), "envoy.filters.http.ext_proc,envoy.filters.http.lua,envoy.filters.http.router"; got != want {
		t.Fatalf("http_filters = %s; want %s", got, want)
	}
	if got, want := dig(t, hcm, "http_filters", 1, "typed_config"), dig(t, ref.hcm(), "http_filters", 1, "typed_config"); !reflect.DeepEqual(got, want) {
		t.Errorf("Lua guard = %v; want the reference's (envoy/fallback_strip.lua)", got)
	}
	for _, k := range []string{"normalize_path", "merge_slashes", "path_with_escaped_slashes_action"} {
		if hcm[k] != ref.hcm()[k] {
			t.Errorf("%s = %v; want the reference's %v", k, hcm[k], ref.hcm()[k])
		}
	}
}

// egToExtProc translates an EnvoyExtensionPolicy extProc entry into Envoy's ExternalProcessor
// the way Envoy Gateway does for the fields the example sets.
func egToExtProc(t *testing.T, e map[string]any, cluster string) map[string]any {
	t.Helper()
	body := map[string]string{"Buffered": "BUFFERED", "Streamed": "STREAMED",
		"BufferedPartial": "BUFFERED_PARTIAL", "FullDuplexStreamed": "FULL_DUPLEX_STREAMED"}
	mode := map[string]any{}
	var attrs any
	for dir, prefix := range map[string]string{"request": "request_", "response": "response_"} {
		if opts, ok := dig(t, e, "processingMode").(map[string]any)[dir]; ok {
			if a, ok := opts.(map[string]any)["attributes"]; ok && dir == "request" {
				attrs = a // processingMode.request.attributes is Envoy's request_attributes
			}
			mode[prefix+"header_mode"] = "SEND"
			b := dig(t, opts, "body").(string)
			if body[b] == "" {
				t.Fatalf("processingMode.%s.body %q is not an Envoy Gateway body mode", dir, b)
			}
			mode[prefix+"body_mode"] = body[b]
		}
	}
	out := map[string]any{
		"@type":               "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor",
		"grpc_service":        map[string]any{"envoy_grpc": map[string]any{"cluster_name": cluster}},
		"failure_mode_allow":  dig(t, e, "failOpen"),
		"message_timeout":     dig(t, e, "messageTimeout"),
		"allow_mode_override": false,
		"processing_mode":     mode,
		"metadata_options": map[string]any{
			"forwarding_namespaces": map[string]any{"untyped": dig(t, e, "metadata", "accessibleNamespaces")},
			"receiving_namespaces":  map[string]any{"untyped": dig(t, e, "metadata", "writableNamespaces")},
		},
	}
	if attrs != nil {
		out["request_attributes"] = attrs
	}
	return out
}

// TestEnvoyGatewayExample checks the Envoy Gateway objects against each other, against Envoy
// Gateway's validation rules for the fields used, and against the reference bootstrap; the
// ext_proc filter and header removal they translate to are run through `envoy --mode validate`.
func TestEnvoyGatewayExample(t *testing.T) {
	objs := loadObjects(t, filepath.Join("examples", "envoy-gateway", "condisagg-envoy-gateway.yaml"))
	ref := loadReference(t)
	translated := checkEGExtProc(t, objs, ref)
	checkEGRoute(t, objs)

	btp := object(t, objs, "BackendTrafficPolicy", "condisagg")
	egTargets(t, objs, btp, "HTTPRoute", "llm")
	if got := dig(t, btp, "spec", "loadBalancer", "endpointOverride", "extractFrom", 0, "header"); got != "x-gateway-destination-endpoint" {
		t.Errorf("endpointOverride header = %v; want x-gateway-destination-endpoint", got)
	}
	if _, retry := dig(t, btp, "spec").(map[string]any)["retry"]; retry {
		t.Error("BackendTrafficPolicy sets retries (a retry re-sends the prompt and double-books)")
	}

	ctp := object(t, objs, "ClientTrafficPolicy", "condisagg")
	egTargets(t, objs, ctp, "Gateway", "llm")
	removed := dig(t, ctp, "spec", "headers", "earlyRequestHeaders", "remove").([]any)
	mustStrip := append([]string{"x-condisagg-route", "x-condisagg-decode-host", "x-condisagg-prefill-host", "x-condisagg-decision"}, StrippedHeaders()...)
	for _, h := range mustStrip {
		if !slices.Contains(removed, any(h)) {
			t.Errorf("ClientTrafficPolicy does not strip %s", h)
		}
	}
	var early []any
	for _, h := range removed {
		early = append(early, map[string]any{"remove": h})
	}

	if got := dig(t, ctp, "spec", "connection", "bufferLimit"); got != fmt.Sprintf("%dMi", DefaultMaxBodyBytes>>20) {
		t.Errorf("ClientTrafficPolicy bufferLimit = %v; want condisagg's default max_body_bytes (%d)", got, DefaultMaxBodyBytes)
	}
	// Envoy Gateway's path settings for the reference's normalize_path, merge_slashes and
	// UNESCAPE_AND_FORWARD (normalize_path is on by default there).
	if got := dig(t, ctp, "spec", "path", "escapedSlashesAction"); got != "UnescapeAndForward" || ref.hcm()["path_with_escaped_slashes_action"] != "UNESCAPE_AND_FORWARD" {
		t.Errorf("ClientTrafficPolicy path.escapedSlashesAction = %v; want UnescapeAndForward as the reference", got)
	}
	if got := dig(t, ctp, "spec", "path", "disableMergeSlashes"); got != false {
		t.Errorf("ClientTrafficPolicy path.disableMergeSlashes = %v; want false (merge_slashes)", got)
	}
	lua := checkEGGuard(t, objs)

	// What Envoy Gateway generates for these fields, in the reference bootstrap: validated by Envoy.
	hcm := ref.hcm()
	hcm["http_filters"].([]any)[0].(map[string]any)["typed_config"] = translated
	dig(t, hcm, "http_filters", 1, "typed_config", "default_source_code").(map[string]any)["inline_string"] = lua
	dig(t, hcm, "early_header_mutation_extensions", 0, "typed_config").(map[string]any)["mutations"] = early
	ref.cluster("condisagg")["outlier_detection"], ref.cluster("condisagg")["circuit_breakers"] = checkEGFailover(t, objs, translated)
	writeAndValidate(t, ref.doc)
}

// envoyDuration converts a Gateway API duration ("5ms") to Envoy's form ("0.005s").
func envoyDuration(t *testing.T, v any) string {
	t.Helper()
	d, err := time.ParseDuration(fmt.Sprint(v))
	if err != nil {
		t.Fatalf("duration %v: %v", v, err)
	}
	return protoDuration(d)
}

// checkEGFailover translates the extProc entry's backendSettings as Envoy Gateway does (passive
// health check: the ext_proc cluster's outlier_detection; circuit breaker: its circuit_breakers;
// retry: the ext_proc grpc_service's retry_policy, set on translated) and checks them against the
// reference's settings for several replicas; it returns the outlier_detection and the
// circuit_breakers.
func checkEGFailover(t *testing.T, objs []map[string]any, translated map[string]any) (outlier, breakers map[string]any) {
	t.Helper()
	replicas := loadReplicaReference(t)
	bs := dig(t, object(t, objs, "EnvoyExtensionPolicy", "condisagg"), "spec", "extProc", 0, "backendSettings").(map[string]any)
	for k := range bs {
		if k != "healthCheck" && k != "retry" && k != "circuitBreaker" {
			t.Errorf("backendSettings.%s is not modelled by this test", k)
		}
	}
	th := map[string]any{}
	for k, v := range dig(t, bs, "circuitBreaker").(map[string]any) {
		envoyName := map[string]string{"maxConnections": "max_connections", "maxPendingRequests": "max_pending_requests",
			"maxParallelRequests": "max_requests", "maxParallelRetries": "max_retries"}[k]
		if envoyName == "" {
			t.Errorf("circuitBreaker.%s is not modelled by this test", k)
			continue
		}
		th[envoyName] = v
	}
	if want := dig(t, replicas.cluster("condisagg"), "circuit_breakers", "thresholds", 0).(map[string]any); !reflect.DeepEqual(th, want) {
		t.Errorf("backendSettings.circuitBreaker translates to thresholds %v; want the reference's %v", th, want)
	}
	breakers = map[string]any{"thresholds": []any{th}}
	passive := dig(t, bs, "healthCheck", "passive").(map[string]any)
	// Envoy Gateway's CRD defaults consecutive5XxErrors to 5, Envoy's default.
	od := map[string]any{"consecutive_5xx": 5}
	for k, v := range passive {
		switch k {
		case "splitExternalLocalOriginErrors":
			od["split_external_local_origin_errors"] = v
		case "consecutiveLocalOriginFailures":
			od["consecutive_local_origin_failure"] = v
		case "interval":
			od["interval"] = envoyDuration(t, v)
		case "baseEjectionTime":
			od["base_ejection_time"] = envoyDuration(t, v)
		case "maxEjectionPercent":
			od["max_ejection_percent"] = v
		default:
			t.Errorf("healthCheck.passive.%s is not modelled by this test", k)
		}
	}
	want := maps.Clone(dig(t, replicas.cluster("condisagg"), "outlier_detection").(map[string]any))
	if _, ok := want["interval"]; !ok {
		want["interval"] = "10s" // Envoy's default (Envoy Gateway's is 3s, hence set)
	}
	for k, v := range want {
		if od[k] != v {
			t.Errorf("healthCheck.passive translates to outlier_detection.%s = %v; want the reference's %v", k, od[k], v)
		}
	}

	retry := dig(t, bs, "retry").(map[string]any)
	var on []string
	for _, tr := range dig(t, retry, "retryOn", "triggers").([]any) {
		on = append(on, tr.(string))
	}
	backOff := dig(t, retry, "perRetry", "backOff")
	rp := map[string]any{
		"retry_on":    strings.Join(on, ","),
		"num_retries": dig(t, retry, "numRetries"),
		// Envoy Gateway sets both or neither (a nil maxInterval would not translate).
		"retry_back_off": map[string]any{"base_interval": envoyDuration(t, dig(t, backOff, "baseInterval")),
			"max_interval": envoyDuration(t, dig(t, backOff, "maxInterval"))},
	}
	ref := dig(t, replicas.extProc(), "grpc_service", "retry_policy").(map[string]any)
	for _, k := range []string{"retry_on", "num_retries", "retry_back_off"} {
		if !reflect.DeepEqual(rp[k], ref[k]) {
			t.Errorf("backendSettings.retry translates to retry_policy.%s = %v; want the reference's %v", k, rp[k], ref[k])
		}
	}
	translated["grpc_service"].(map[string]any)["retry_policy"] = rp
	return od, breakers
}

// checkEGGuard checks that the EnvoyExtensionPolicy carries the fail-open guard, the same script
// as the reference's, ordered after ext_proc by the Gateway's EnvoyProxy; it returns the script.
func checkEGGuard(t *testing.T, objs []map[string]any) string {
	t.Helper()
	eep := object(t, objs, "EnvoyExtensionPolicy", "condisagg")
	l := dig(t, eep, "spec", "lua", 0)
	if dig(t, l, "type") != "Inline" || dig(t, l, "inline") != FallbackStripLua {
		t.Errorf("EnvoyExtensionPolicy lua[0] is not envoy/fallback_strip.lua inline")
	}
	ref := dig(t, object(t, objs, "Gateway", "llm"), "spec", "infrastructure", "parametersRef")
	if dig(t, ref, "kind") != "EnvoyProxy" || dig(t, ref, "group") != "gateway.envoyproxy.io" {
		t.Fatalf("Gateway parametersRef = %v; want an EnvoyProxy", ref)
	}
	order := dig(t, object(t, objs, "EnvoyProxy", dig(t, ref, "name").(string)), "spec", "filterOrder", 0)
	if dig(t, order, "name") != "envoy.filters.http.lua" || dig(t, order, "after") != "envoy.filters.http.ext_proc" {
		t.Errorf("EnvoyProxy filterOrder[0] = %v; want lua after ext_proc (Envoy Gateway runs Lua first by default)", order)
	}
	return dig(t, l, "inline").(string)
}

// egTargets checks that policy o targets the named object and that it exists in objs.
func egTargets(t *testing.T, objs []map[string]any, o map[string]any, kind, name string) {
	t.Helper()
	tr := dig(t, o, "spec", "targetRefs", 0)
	if dig(t, tr, "kind") != kind || dig(t, tr, "name") != name {
		t.Errorf("%s targets %v; want %s %s", dig(t, o, "kind"), tr, kind, name)
	}
	object(t, objs, kind, name)
}

// checkEGExtProc checks the EnvoyExtensionPolicy and returns its ext_proc entry translated to
// Envoy's ExternalProcessor.
func checkEGExtProc(t *testing.T, objs []map[string]any, ref reference) map[string]any {
	t.Helper()
	eep := object(t, objs, "EnvoyExtensionPolicy", "condisagg")
	egTargets(t, objs, eep, "HTTPRoute", "llm")
	procs := dig(t, eep, "spec", "extProc").([]any)
	if len(procs) != 1 {
		t.Fatalf("%d extProc entries; want 1", len(procs))
	}
	e := procs[0].(map[string]any)
	be := dig(t, e, "backendRefs", 0)
	if ap := servicePort(t, objs, dig(t, be, "name").(string), dig(t, be, "port").(int))["appProtocol"]; ap != "kubernetes.io/h2c" {
		t.Errorf("ext_proc Service appProtocol = %v; want kubernetes.io/h2c", ap)
	}
	// Envoy Gateway's CEL rules for ExtProc and ExtProcMetadata.
	translated := egToExtProc(t, e, "condisagg")
	pm := translated["processing_mode"].(map[string]any)
	if e["failOpen"] == true && (pm["request_body_mode"] == "FULL_DUPLEX_STREAMED" || pm["response_body_mode"] == "FULL_DUPLEX_STREAMED") {
		t.Error("failOpen: true with FullDuplexStreamed is rejected by Envoy Gateway")
	}
	for _, ns := range dig(t, e, "metadata", "writableNamespaces").([]any) {
		if strings.HasPrefix(ns.(string), "envoy.filters.http") {
			t.Errorf("writableNamespaces %v is rejected by Envoy Gateway", ns)
		}
	}
	if !reflect.DeepEqual(without(translated, "grpc_service"), without(ref.extProc(), "grpc_service")) {
		t.Errorf("EnvoyExtensionPolicy translates to\n %v\nwant the reference's\n %v", without(translated, "grpc_service"), without(ref.extProc(), "grpc_service"))
	}
	return translated
}

// checkEGRoute checks the HTTPRoute's rule table and that every backend is a Service port of objs.
func checkEGRoute(t *testing.T, objs []map[string]any) {
	t.Helper()
	route := object(t, objs, "HTTPRoute", "llm")
	var rules []string
	for _, r := range dig(t, route, "spec", "rules").([]any) {
		m := dig(t, r, "matches", 0).(map[string]any)
		desc := "*"
		if hs, ok := m["headers"]; ok {
			h := hs.([]any)[0]
			desc = fmt.Sprintf("%v=%v", dig(t, h, "name"), dig(t, h, "value"))
		}
		b := dig(t, r, "backendRefs", 0)
		servicePort(t, objs, dig(t, b, "name").(string), dig(t, b, "port").(int))
		rules = append(rules, fmt.Sprintf("%s->%v", desc, dig(t, b, "name")))
	}
	if got, want := strings.Join(rules, " "), "x-condisagg-route=prefill->pd-sidecar x-condisagg-route=decode->vllm-decode *->vllm-decode"; got != want {
		t.Errorf("HTTPRoute rules = %s; want %s", got, want)
	}
}
