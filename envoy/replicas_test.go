package envoy

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// TestExtProcReplicas: ExtProcReplicas become further hosts of the condisagg cluster, after
// ExtProc and in order (STRICT_DNS as soon as one is a name); with more than one host the
// cluster ejects a replica at its first local-origin failure (never half the hosts or more)
// and the ext_proc filter replays a stream reset before any answer once on another replica,
// with one host neither is rendered; the result passes envoy --mode validate; a bad replica
// endpoint is refused by its index.
func TestExtProcReplicas(t *testing.T) {
	bin := envoyBin(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	for _, tc := range []struct {
		replicas []Endpoint
		typ      string
	}{
		{nil, "STATIC"},
		{[]Endpoint{{Host: "127.0.0.1", Port: 9003}, {Host: "127.0.0.1", Port: 9004}}, "STATIC"},
		{[]Endpoint{{Host: "condisagg-1.llm.svc", Port: 9002}}, "STRICT_DNS"},
	} {
		p := testParams(Buffered, FailOpen)
		p.ExtProcReplicas = tc.replicas
		doc, ext := renderExtProcCluster(t, p)
		if typ := dig(t, ext, "type"); typ != tc.typ {
			t.Errorf("condisagg cluster type %v; want %s", typ, tc.typ)
		}
		var got []string
		for _, e := range dig(t, ext, "load_assignment", "endpoints", 0, "lb_endpoints").([]any) {
			sa := dig(t, e, "endpoint", "address", "socket_address")
			got = append(got, fmt.Sprintf("%v:%v", dig(t, sa, "address"), dig(t, sa, "port_value")))
		}
		want := []string{p.ExtProc.String()}
		for _, r := range tc.replicas {
			want = append(want, r.String())
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("condisagg hosts %v; want %v", got, want)
		}
		od, hasOD := ext.(map[string]any)["outlier_detection"]
		grpc := extProcGRPCService(t, doc)
		rp, hasRetry := grpc["retry_policy"]
		if len(tc.replicas) == 0 {
			if hasOD || hasRetry {
				t.Errorf("one host: outlier_detection %v, retry_policy %v; want neither", od, rp)
			}
		} else {
			if !hasOD || !hasRetry {
				t.Fatalf("%d hosts: outlier_detection %v, retry_policy %v; want both", len(want), od, rp)
			}
			for k, v := range map[string]any{"split_external_local_origin_errors": true, "consecutive_local_origin_failure": 1, "max_ejection_percent": 50} {
				if dig(t, od, k) != v {
					t.Errorf("outlier_detection.%s %v; want %v", k, dig(t, od, k), v)
				}
			}
			if on := dig(t, rp, "retry_on"); on != "reset,connect-failure,refused-stream" {
				t.Errorf("retry_policy.retry_on %v", on)
			}
			if pred := dig(t, rp, "retry_host_predicate", 0, "name"); pred != "envoy.retry_host_predicates.previous_hosts" {
				t.Errorf("retry_policy.retry_host_predicate %v; want previous_hosts", pred)
			}
			if mr := dig(t, ext, "circuit_breakers", "thresholds", 0, "max_retries"); mr != p.WithDefaults().MaxRequests {
				t.Errorf("condisagg max_retries %v; want max_requests %d", mr, p.WithDefaults().MaxRequests)
			}
		}
		path, err := WriteBootstrap(t.TempDir(), p)
		if err != nil {
			t.Fatal(err)
		}
		if err := Validate(ctx, bin, path); err != nil {
			t.Fatal(err)
		}
	}
	p := testParams(Buffered, FailOpen)
	p.ExtProcReplicas = []Endpoint{{Host: "127.0.0.1", Port: 9003}, {Host: "bad host", Port: 0}}
	if _, err := Render(p); err == nil || !strings.Contains(err.Error(), "ext_proc_replicas[1].host") ||
		!strings.Contains(err.Error(), "ext_proc_replicas[1].port") {
		t.Errorf("Render with a bad replica: %v; want ext_proc_replicas[1] host and port named", err)
	}
}

// renderExtProcCluster renders p and returns the decoded bootstrap and its condisagg (ext_proc)
// cluster.
func renderExtProcCluster(t *testing.T, p Params) (doc map[string]any, ext any) {
	t.Helper()
	out, err := Render(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	for _, c := range dig(t, doc, "static_resources", "clusters").([]any) {
		if dig(t, c, "name") == "condisagg" {
			return doc, c
		}
	}
	t.Fatal("no condisagg cluster")
	return nil, nil
}

// extProcGRPCService returns the grpc_service of the ext_proc filter in a rendered bootstrap.
func extProcGRPCService(t *testing.T, doc map[string]any) map[string]any {
	t.Helper()
	hcm := dig(t, doc, "static_resources", "listeners", 0, "filter_chains", 0, "filters", 0, "typed_config")
	for _, f := range dig(t, hcm, "http_filters").([]any) {
		if dig(t, f, "name") == "envoy.filters.http.ext_proc" {
			return dig(t, f, "typed_config", "grpc_service").(map[string]any)
		}
	}
	t.Fatal("no ext_proc filter")
	return nil
}

// TestExtProcResolvesToReplicas: a name that resolves to every replica (a headless Service)
// becomes one strict DNS entry of the DNS cluster extension (TTL respected, at most once a
// second, IPv4 first), with the ejection and replay settings of several replicas although one
// endpoint is listed; envoy --mode validate accepts it; an IP address or listed replicas are
// refused, naming the field.
func TestExtProcResolvesToReplicas(t *testing.T) {
	bin := envoyBin(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	for _, mode := range []struct {
		m    BodyMode
		open bool
	}{{Buffered, FailOpen}, {FullDuplex, FailClosed}} {
		p := testParams(mode.m, mode.open)
		p.ExtProc = Endpoint{Host: "condisagg-pods.llm.svc.cluster.local", Port: 9002}
		p.ExtProcResolvesToReplicas = true
		doc, ext := renderExtProcCluster(t, p)
		if _, ok := ext.(map[string]any)["type"]; ok || dig(t, ext, "cluster_type", "name") != "envoy.clusters.dns" {
			t.Errorf("%s: condisagg cluster type %v, cluster_type %v; want only the envoy.clusters.dns extension", mode.m,
				ext.(map[string]any)["type"], dig(t, ext, "cluster_type", "name"))
		}
		dns := dig(t, ext, "cluster_type", "typed_config")
		for k, v := range map[string]any{"respect_dns_ttl": true, "dns_min_refresh_rate": "1s", "dns_lookup_family": "V4_PREFERRED"} {
			if dig(t, dns, k) != v {
				t.Errorf("%s: DnsCluster.%s %v; want %v", mode.m, k, dig(t, dns, k), v)
			}
		}
		if dig(t, ext, "outlier_detection", "consecutive_local_origin_failure") != 1 ||
			dig(t, ext, "circuit_breakers", "thresholds", 0, "max_retries") != p.WithDefaults().MaxRequests {
			t.Errorf("%s: outlier_detection %v, circuit_breakers %v; want the several-replica settings", mode.m,
				dig(t, ext, "outlier_detection"), dig(t, ext, "circuit_breakers"))
		}
		if rp := extProcGRPCService(t, doc)["retry_policy"]; rp == nil || dig(t, rp, "num_retries") != 1 {
			t.Errorf("%s: ext_proc retry_policy %v; want one retry", mode.m, rp)
		}
		path, err := WriteBootstrap(t.TempDir(), p)
		if err != nil {
			t.Fatal(err)
		}
		if err := Validate(ctx, bin, path); err != nil {
			t.Fatal(err)
		}
	}
	p := testParams(Buffered, FailOpen)
	p.ExtProcResolvesToReplicas = true
	p.ExtProc = Endpoint{Host: "10.0.0.7", Port: 9002}
	p.ExtProcReplicas = []Endpoint{{Host: "10.0.0.8", Port: 9002}}
	if _, err := Render(p); err == nil || !strings.Contains(err.Error(), "ext_proc.host") || !strings.Contains(err.Error(), "ext_proc_replicas") {
		t.Errorf("Render with an IP address and listed replicas: %v; want ext_proc.host and ext_proc_replicas named", err)
	}
}
