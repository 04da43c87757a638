package helm

import (
	"fmt"
	"reflect"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

// TestChartReplicasByDefault: the router and the chart's Envoy run two replicas by default,
// kept on different nodes where possible (a preferred anti-affinity on the pods' own selector)
// and spread over zones, each with a budget that keeps one pod through drains.
func TestChartReplicasByDefault(t *testing.T) {
	objs := render(t, variantNamed(t, "plain_envoy"))
	for _, name := range []string{release, release + "-envoy"} {
		dep := decodeAs[*appsv1.Deployment](t, find(t, objs, "Deployment", name))
		if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 2 {
			t.Errorf("%s replicas = %v; want 2", name, dep.Spec.Replicas)
		}
		pod := dep.Spec.Template.Spec
		if pod.Affinity == nil || pod.Affinity.PodAntiAffinity == nil {
			t.Fatalf("%s has no pod anti-affinity", name)
		}
		pref := pod.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution
		if len(pref) != 1 || pref[0].PodAffinityTerm.TopologyKey != "kubernetes.io/hostname" || pref[0].PodAffinityTerm.LabelSelector == nil ||
			!reflect.DeepEqual(pref[0].PodAffinityTerm.LabelSelector.MatchLabels, dep.Spec.Selector.MatchLabels) ||
			len(pod.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 0 {
			t.Errorf("%s anti-affinity = %+v; want one preferred term on the hostname for its own pods", name, pod.Affinity.PodAntiAffinity)
		}
		checkSpread(t, pod.TopologySpreadConstraints, dep, "topology.kubernetes.io/zone", nil)
		pdb := decodeAs[*policyv1.PodDisruptionBudget](t, find(t, objs, "PodDisruptionBudget", name))
		if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 1 || pdb.Spec.MaxUnavailable != nil {
			t.Errorf("%s PDB minAvailable %v maxUnavailable %v; want 1 and none", name, pdb.Spec.MinAvailable, pdb.Spec.MaxUnavailable)
		}
	}
	// An affinity of one's own with a podAntiAffinity replaces the preset; "none" drops it.
	objs = render(t, variant{values: []string{"common.yaml"}, set: []string{"podAntiAffinityPreset=none"}})
	if pod, _ := routerPod(t, objs); pod.Affinity != nil {
		t.Errorf("podAntiAffinityPreset=none still renders %+v", pod.Affinity)
	}
	objs = render(t, variant{values: []string{"common.yaml"}, set: []string{
		"affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey=kubernetes.io/hostname",
		"affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector.matchLabels.tier=routing"}})
	if pod, _ := routerPod(t, objs); pod.Affinity == nil || pod.Affinity.PodAntiAffinity == nil ||
		len(pod.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 0 ||
		len(pod.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 1 {
		t.Errorf("own podAntiAffinity was not kept alone: %+v", pod.Affinity)
	}
	// One replica with a budget that allows its eviction.
	objs = render(t, variant{values: []string{"common.yaml"}, set: []string{"replicaCount=1", "podDisruptionBudget.minAvailable=null", "podDisruptionBudget.maxUnavailable=1"}})
	pdb := decodeAs[*policyv1.PodDisruptionBudget](t, find(t, objs, "PodDisruptionBudget", release))
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 || pdb.Spec.MinAvailable != nil {
		t.Errorf("one-replica PDB = %+v", pdb.Spec)
	}
}

// TestChartBus: with bus.enabled the serve config names the bus (replicas.nats_url, lease),
// and with bus.nats.deploy the chart runs a NATS server that only the router pods may reach;
// with bus.url it runs none and uses that URL. Off by default: no replicas key, no NATS.
func TestChartBus(t *testing.T) {
	replicasOf := func(objs []object) map[string]any {
		_, c := routerPod(t, objs)
		text, _ := serveConfigText(t, objs, c)
		var cfg map[string]any
		if err := yaml.UnmarshalStrict([]byte(text), &cfg); err != nil {
			t.Fatal(err)
		}
		r, _ := cfg["replicas"].(map[string]any)
		return r
	}
	hasNATS := func(objs []object) bool {
		for _, o := range objs {
			if o.Name == release+"-nats" {
				return true
			}
		}
		return false
	}
	off := render(t, variantNamed(t, "no_gateway"))
	if r := replicasOf(off); r != nil || hasNATS(off) {
		t.Fatalf("bus off: replicas %v, NATS rendered %v", r, hasNATS(off))
	}

	on := render(t, variant{values: []string{"common.yaml"}, set: []string{"bus.enabled=true", "bus.lease=6s"}})
	if r := replicasOf(on); r["nats_url"] != "nats://"+release+"-nats:4222" || r["lease"] != "6s" || len(r) != 2 {
		t.Errorf("bus on: replicas = %v", r)
	}
	nats := decodeAs[*appsv1.Deployment](t, find(t, on, "Deployment", release+"-nats"))
	svc := decodeAs[*corev1.Service](t, find(t, on, "Service", release+"-nats"))
	if !reflect.DeepEqual(svc.Spec.Selector, nats.Spec.Template.Labels) || svc.Spec.Ports[0].Port != 4222 {
		t.Errorf("NATS Service selects %v on %d; pods are %v", svc.Spec.Selector, svc.Spec.Ports[0].Port, nats.Spec.Template.Labels)
	}
	router := decodeAs[*appsv1.Deployment](t, find(t, on, "Deployment", release))
	if reflect.DeepEqual(nats.Spec.Template.Labels, router.Spec.Template.Labels) {
		t.Error("NATS pods carry the router's labels (the router's Service and PDB would select them)")
	}
	np := decodeAs[*networkingv1.NetworkPolicy](t, find(t, on, "NetworkPolicy", release+"-nats"))
	if len(np.Spec.Ingress) != 1 || len(np.Spec.Ingress[0].From) != 1 ||
		!reflect.DeepEqual(np.Spec.Ingress[0].From[0].PodSelector.MatchLabels, router.Spec.Selector.MatchLabels) {
		t.Errorf("NATS NetworkPolicy ingress = %+v; want the router pods only", np.Spec.Ingress)
	}

	ext := render(t, variant{values: []string{"common.yaml"}, set: []string{"bus.enabled=true", "bus.url=nats://nats.infra:4222"}})
	if r := replicasOf(ext); r["nats_url"] != "nats://nats.infra:4222" || hasNATS(ext) {
		t.Errorf("external bus: replicas %v, NATS rendered %v", r, hasNATS(ext))
	}
}

// TestChartWarmStart: with warmStart the serve config names the router's own Service at its
// Admin gRPC port (which the Service then carries) as the peer to copy the index from, and the
// NetworkPolicy admits the router pods to the admin ports.
func TestChartWarmStart(t *testing.T) {
	objs := render(t, variantNamed(t, "warm_start"))
	_, c := routerPod(t, objs)
	text, _ := serveConfigText(t, objs, c)
	var cfg map[string]any
	if err := yaml.UnmarshalStrict([]byte(text), &cfg); err != nil {
		t.Fatal(err)
	}
	r, _ := cfg["replicas"].(map[string]any)
	svc := decodeAs[*corev1.Service](t, find(t, objs, "Service", release))
	var adminPort int32
	for _, p := range svc.Spec.Ports {
		if p.TargetPort.String() == "grpc-admin" || p.Name == "grpc-admin" {
			adminPort = p.Port
		}
	}
	want := fmt.Sprintf("%s.%s.svc:%d", release, namespace, adminPort)
	if adminPort == 0 || r["warm_from"] != want || r["warm_timeout"] != "30s" {
		t.Errorf("replicas = %v; want warm_from %s (the Service's Admin gRPC port), warm_timeout 30s", r, want)
	}
	np := decodeAs[*networkingv1.NetworkPolicy](t, find(t, objs, "NetworkPolicy", release))
	router := decodeAs[*appsv1.Deployment](t, find(t, objs, "Deployment", release))
	admitted := false
	for _, rule := range np.Spec.Ingress {
		for _, p := range rule.Ports {
			if p.Port.IntValue() != int(adminPort) {
				continue
			}
			for _, f := range rule.From {
				if f.PodSelector != nil && f.NamespaceSelector == nil && reflect.DeepEqual(f.PodSelector.MatchLabels, router.Spec.Selector.MatchLabels) {
					admitted = true
				}
			}
		}
	}
	if !admitted {
		t.Errorf("NetworkPolicy does not admit the router pods to Admin gRPC port %d: %+v", adminPort, np.Spec.Ingress)
	}
}

// TestChartEnvoySeesEveryReplica: with the chart's Envoy, a headless Service lists every ready
// router pod at the ext_proc port, and Envoy's ext_proc cluster resolves it as strict DNS (the
// DNS cluster extension: the record's TTL, at most once a second, IPv4 first) with the settings
// of several replicas: ejection at the first local-origin failure (never half the hosts), the
// replay of an unanswered stream once on another host, max_retries at the request limit. The
// same with one replica and two: the count can change without a new bootstrap (kubectl scale,
// a rolling update's surge pod). The ClusterIP Service stays for the other consumers; without
// the chart's Envoy there is no headless Service.
func TestChartEnvoySeesEveryReplica(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  []string
	}{
		{"two_replicas_buffered", nil},
		{"two_replicas_full_duplex", []string{"gateway.envoy.mode=full-duplex"}},
		{"one_replica", []string{"replicaCount=1", "podDisruptionBudget.minAvailable=null", "podDisruptionBudget.maxUnavailable=1"}},
		{"other_port", []string{"ports.extProc=7002"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			objs := render(t, variant{values: []string{"common.yaml", "plain-envoy.yaml"}, set: tc.set})
			router := decodeAs[*appsv1.Deployment](t, find(t, objs, "Deployment", release))
			var extProcPort int32
			for _, p := range router.Spec.Template.Spec.Containers[0].Ports {
				if p.Name == "grpc-extproc" {
					extProcPort = p.ContainerPort
				}
			}
			if extProcPort == 0 {
				t.Fatalf("router container has no grpc-extproc port: %+v", router.Spec.Template.Spec.Containers[0].Ports)
			}

			pods := decodeAs[*corev1.Service](t, find(t, objs, "Service", release+"-pods"))
			if pods.Spec.ClusterIP != corev1.ClusterIPNone || pods.Spec.PublishNotReadyAddresses ||
				!reflect.DeepEqual(pods.Spec.Selector, router.Spec.Selector.MatchLabels) {
				t.Errorf("%s-pods: clusterIP %q publishNotReadyAddresses %v selector %v; want None, false, the router's %v",
					release, pods.Spec.ClusterIP, pods.Spec.PublishNotReadyAddresses, pods.Spec.Selector, router.Spec.Selector.MatchLabels)
			}
			if len(pods.Spec.Ports) != 1 || pods.Spec.Ports[0].Port != extProcPort || pods.Spec.Ports[0].TargetPort.IntValue() != int(extProcPort) {
				t.Errorf("%s-pods ports %+v; want the ext_proc port %d only", release, pods.Spec.Ports, extProcPort)
			}
			svc := decodeAs[*corev1.Service](t, find(t, objs, "Service", release))
			if svc.Spec.ClusterIP == corev1.ClusterIPNone || svc.Spec.Type != corev1.ServiceTypeClusterIP {
				t.Errorf("the router's Service is %s %q; want the ClusterIP Service kept", svc.Spec.Type, svc.Spec.ClusterIP)
			}

			var doc map[string]any
			if err := yaml.Unmarshal([]byte(bootstrapOf(t, objs, release)), &doc); err != nil {
				t.Fatal(err)
			}
			var ext any
			for _, c := range dig(t, doc, "static_resources", "clusters").([]any) {
				if dig(t, c, "name") == "condisagg" {
					ext = c
				}
			}
			if ext == nil {
				t.Fatal("bootstrap has no condisagg cluster")
			}
			if typ, ok := ext.(map[string]any)["type"]; ok {
				t.Errorf("condisagg cluster has type %v beside cluster_type", typ)
			}
			if n := dig(t, ext, "cluster_type", "name"); n != "envoy.clusters.dns" {
				t.Errorf("condisagg cluster_type %v; want envoy.clusters.dns", n)
			}
			dns := dig(t, ext, "cluster_type", "typed_config")
			for k, v := range map[string]any{"@type": "type.googleapis.com/envoy.extensions.clusters.dns.v3.DnsCluster",
				"respect_dns_ttl": true, "dns_min_refresh_rate": "1s", "dns_lookup_family": "V4_PREFERRED"} {
				if got := dig(t, dns, k); got != v {
					t.Errorf("DnsCluster.%s = %v; want %v", k, got, v)
				}
			}
			if all, ok := dns.(map[string]any)["all_addresses_in_single_endpoint"]; ok && all != false {
				t.Errorf("all_addresses_in_single_endpoint %v: every address must be a host", all)
			}
			eps := dig(t, ext, "load_assignment", "endpoints", 0, "lb_endpoints").([]any)
			wantHost := fmt.Sprintf("%s-pods.%s.svc.cluster.local", release, namespace)
			if len(eps) != 1 || dig(t, eps[0], "endpoint", "address", "socket_address", "address") != wantHost ||
				dig(t, eps[0], "endpoint", "address", "socket_address", "port_value") != float64(extProcPort) {
				t.Errorf("condisagg endpoints %v; want %s:%d", eps, wantHost, extProcPort)
			}
			od := dig(t, ext, "outlier_detection")
			for k, v := range map[string]any{"split_external_local_origin_errors": true, "consecutive_local_origin_failure": float64(1), "max_ejection_percent": float64(50)} {
				if got := dig(t, od, k); got != v {
					t.Errorf("outlier_detection.%s = %v; want %v", k, got, v)
				}
			}
			th := dig(t, ext, "circuit_breakers", "thresholds", 0)
			if mr, mq := dig(t, th, "max_retries"), dig(t, th, "max_requests"); mr == nil || mr != mq {
				t.Errorf("condisagg max_retries %v; want max_requests %v", mr, mq)
			}
			var rp any
			hcm := dig(t, doc, "static_resources", "listeners", 0, "filter_chains", 0, "filters", 0, "typed_config")
			for _, f := range dig(t, hcm, "http_filters").([]any) {
				if dig(t, f, "name") == "envoy.filters.http.ext_proc" {
					rp = dig(t, f, "typed_config", "grpc_service", "retry_policy")
				}
			}
			if rp == nil || dig(t, rp, "retry_on") != "reset,connect-failure,refused-stream" || dig(t, rp, "num_retries") != float64(1) ||
				dig(t, rp, "retry_host_predicate", 0, "name") != "envoy.retry_host_predicates.previous_hosts" {
				t.Errorf("ext_proc grpc_service.retry_policy %v; want one retry on reset/connect-failure/refused-stream on another host", rp)
			}
		})
	}
	t.Run("no_chart_envoy", func(t *testing.T) {
		t.Parallel()
		for _, o := range render(t, variantNamed(t, "no_gateway")) {
			if o.Kind == "Service" && o.Name == release+"-pods" {
				t.Errorf("headless Service %s rendered without the chart's Envoy", o.Name)
			}
		}
	})
}
