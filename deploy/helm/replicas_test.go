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
