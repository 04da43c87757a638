package helm

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// networkPolicy renders v and returns its NetworkPolicy, strictly decoded (nil when none), and
// every object.
func networkPolicy(t *testing.T, v variant) (*networkingv1.NetworkPolicy, []object) {
	t.Helper()
	objs := render(t, v)
	for _, o := range objs {
		if o.Kind == "NetworkPolicy" {
			np, err := decodeStrict(o)
			if err != nil {
				t.Fatal(err)
			}
			return np.(*networkingv1.NetworkPolicy), objs
		}
	}
	return nil, objs
}

// ruleFor returns the ingress rule that opens port (exactly one must).
func ruleFor(t *testing.T, np *networkingv1.NetworkPolicy, port int32) networkingv1.NetworkPolicyIngressRule {
	t.Helper()
	var found []networkingv1.NetworkPolicyIngressRule
	for _, r := range np.Spec.Ingress {
		for _, p := range r.Ports {
			if p.Port != nil && p.Port.IntVal == port {
				found = append(found, r)
			}
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d ingress rules open port %d; want 1: %+v", len(found), port, np.Spec.Ingress)
	}
	return found[0]
}

func selects(t *testing.T, sel *metav1.LabelSelector, set map[string]string) bool {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Fatal(err)
	}
	return sel != nil && s.Matches(labels.Set(set))
}

func podLabels(t *testing.T, objs []object, name string) map[string]string {
	t.Helper()
	v, err := decodeStrict(find(t, objs, "Deployment", name))
	if err != nil {
		t.Fatal(err)
	}
	return v.(*appsv1.Deployment).Spec.Template.Labels
}

// TestChartNetworkPolicy: off by default; when enabled it selects the router pods, admits to the
// ext_proc port only the gateway's pods of each gateway type (the chart's own Envoy pods, the
// Istio ingress gateway the EnvoyFilter patches, Envoy Gateway's proxy of the Gateway; for the
// Inference Extension the peers given, which the chart requires), and to the admin port only the
// monitoring namespace and the listed peers (Admin gRPC too when exposed).
func TestChartNetworkPolicy(t *testing.T) {
	if np, _ := networkPolicy(t, variant{values: []string{"common.yaml", "plain-envoy.yaml"}}); np == nil {
		t.Fatal("no NetworkPolicy by default: the ext_proc port is open to every pod")
	}
	// Without it the chart wants the operator's word that something else closes the port.
	off := variant{values: []string{"common.yaml", "plain-envoy.yaml"}, set: []string{"networkPolicy.enabled=false"}}
	if _, err := helmRun(t, off.args()...); err == nil || !strings.Contains(err.Error(), "extProc.allowUnauthenticated=true") {
		t.Fatalf("err = %v; want the chart to refuse an unprotected ext_proc port", err)
	}
	off.set = append(off.set, "extProc.allowUnauthenticated=true")
	if np, _ := networkPolicy(t, off); np != nil {
		t.Fatal("a NetworkPolicy is rendered when disabled")
	}
	on := "networkPolicy.enabled=true"
	const extProc, admin, adminGRPC = 9002, 9090, 9003

	t.Run("plain_envoy", func(t *testing.T) {
		np, objs := networkPolicy(t, variant{values: []string{"common.yaml", "plain-envoy.yaml"}, set: []string{on}})
		router := podLabels(t, objs, release)
		envoyPods := podLabels(t, objs, release+"-envoy")
		if !selects(t, &np.Spec.PodSelector, router) || selects(t, &np.Spec.PodSelector, envoyPods) {
			t.Fatalf("podSelector %v must select the router pods %v and not the Envoy pods %v", np.Spec.PodSelector, router, envoyPods)
		}
		if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
			t.Fatalf("policyTypes %v; want [Ingress]", np.Spec.PolicyTypes)
		}
		r := ruleFor(t, np, extProc)
		if len(r.From) != 1 || r.From[0].NamespaceSelector != nil || !selects(t, r.From[0].PodSelector, envoyPods) ||
			selects(t, r.From[0].PodSelector, router) {
			t.Fatalf("ext_proc peers %+v; want exactly the chart's Envoy pods %v", r.From, envoyPods)
		}
		a := ruleFor(t, np, admin)
		if len(a.From) != 1 || a.From[0].PodSelector != nil ||
			!selects(t, a.From[0].NamespaceSelector, map[string]string{"kubernetes.io/metadata.name": "monitoring"}) ||
			selects(t, a.From[0].NamespaceSelector, map[string]string{"kubernetes.io/metadata.name": namespace}) {
			t.Fatalf("admin peers %+v; want the monitoring namespace only", a.From)
		}
		if len(np.Spec.Ingress) != 2 {
			t.Fatalf("%d ingress rules; want ext_proc and admin", len(np.Spec.Ingress))
		}
	})
	t.Run("istio", func(t *testing.T) {
		np, objs := networkPolicy(t, variant{values: []string{"common.yaml", "istio.yaml"}, set: []string{on}})
		ef := find(t, objs, "EnvoyFilter", release)
		workload := map[string]string{}
		for k, v := range dig(t, ef.Doc, "spec", "workloadSelector", "labels").(map[string]any) {
			workload[k] = v.(string)
		}
		r := ruleFor(t, np, extProc)
		if len(r.From) != 1 || !selects(t, r.From[0].PodSelector, workload) ||
			!selects(t, r.From[0].NamespaceSelector, map[string]string{"kubernetes.io/metadata.name": ef.Namespace}) {
			t.Fatalf("ext_proc peers %+v; want the pods %v in %s that the EnvoyFilter patches", r.From, workload, ef.Namespace)
		}
	})
	t.Run("envoy_gateway", func(t *testing.T) {
		np, objs := networkPolicy(t, variant{values: []string{"common.yaml", "envoy-gateway.yaml"}, set: []string{on}})
		gw := find(t, objs, "Gateway", "llm")
		proxy := map[string]string{"app.kubernetes.io/name": "envoy", "gateway.envoyproxy.io/owning-gateway-name": gw.Name,
			"gateway.envoyproxy.io/owning-gateway-namespace": gw.Namespace}
		r := ruleFor(t, np, extProc)
		if len(r.From) != 1 || !selects(t, r.From[0].PodSelector, proxy) ||
			!selects(t, r.From[0].NamespaceSelector, map[string]string{"kubernetes.io/metadata.name": "envoy-gateway-system"}) {
			t.Fatalf("ext_proc peers %+v; want Envoy Gateway's proxy of Gateway %s/%s", r.From, gw.Namespace, gw.Name)
		}
		proxy["gateway.envoyproxy.io/owning-gateway-name"] = "other"
		if selects(t, r.From[0].PodSelector, proxy) {
			t.Fatal("the ext_proc peer admits the proxy of another Gateway")
		}
	})
	t.Run("inference_pool_peers", func(t *testing.T) {
		// Unnamed, the gateway may be any pod of the release namespace, and no pod elsewhere.
		np, _ := networkPolicy(t, variant{values: []string{"common.yaml", "inference-pool.yaml"}, set: []string{on}})
		if r := ruleFor(t, np, extProc); len(r.From) != 1 || r.From[0].NamespaceSelector != nil || r.From[0].PodSelector == nil ||
			len(r.From[0].PodSelector.MatchLabels) != 0 {
			t.Fatalf("ext_proc peers %+v; want every pod of the release namespace only", r.From)
		}
		np, _ = networkPolicy(t, variant{values: []string{"common.yaml", "inference-pool.yaml"}, set: []string{on,
			"networkPolicy.extProcFrom[0].podSelector.matchLabels.gateway\\.networking\\.k8s\\.io/gateway-name=inference-gateway",
			"networkPolicy.adminFrom[0].namespaceSelector.matchLabels.team=ops",
			"admin.grpc.expose=true"}})
		r := ruleFor(t, np, extProc)
		if len(r.From) != 1 || !selects(t, r.From[0].PodSelector, map[string]string{"gateway.networking.k8s.io/gateway-name": "inference-gateway"}) {
			t.Fatalf("ext_proc peers %+v; want the given peer", r.From)
		}
		a := ruleFor(t, np, admin)
		if len(a.From) != 2 || !selects(t, a.From[1].NamespaceSelector, map[string]string{"team": "ops"}) {
			t.Fatalf("admin peers %+v; want monitoring and the given peer", a.From)
		}
		if g := ruleFor(t, np, adminGRPC); len(g.From) != 2 {
			t.Fatalf("exposed Admin gRPC peers %+v; want the admin peers", g.From)
		}
	})
}

// TestChartEngineNetworkPolicy: the engines' KV event and replay ports publish token ids
// (docs/deploy.md §3); enabled, the policy admits only the router pods to them and leaves the
// engines' HTTP ports open; it needs the engines' labels.
func TestChartEngineNetworkPolicy(t *testing.T) {
	base := variant{values: []string{"common.yaml", "plain-envoy.yaml"}}
	for _, o := range render(t, base) {
		if o.Kind == "NetworkPolicy" && o.Name == release+"-engines" {
			t.Fatal("an engine NetworkPolicy without engine labels")
		}
	}
	on := base
	on.set = []string{"engineNetworkPolicy.enabled=true"}
	if _, err := helmRun(t, on.args()...); err == nil || !strings.Contains(err.Error(), "engineNetworkPolicy.podSelector") {
		t.Fatalf("err = %v; want the chart to ask for the engines' labels", err)
	}
	on.set = append(on.set, "engineNetworkPolicy.podSelector.app=vllm")
	objs := render(t, on)
	v, err := decodeStrict(find(t, objs, "NetworkPolicy", release+"-engines"))
	if err != nil {
		t.Fatal(err)
	}
	np := v.(*networkingv1.NetworkPolicy)
	if !selects(t, &np.Spec.PodSelector, map[string]string{"app": "vllm", "role": "decode"}) {
		t.Fatalf("podSelector %v does not select the engines", np.Spec.PodSelector)
	}
	router := podLabels(t, objs, release)
	envoyPods := podLabels(t, objs, release+"-envoy")
	for _, port := range []int32{5557, 5567} {
		r := ruleFor(t, np, port)
		if len(r.From) != 1 || !selects(t, r.From[0].PodSelector, router) || selects(t, r.From[0].PodSelector, envoyPods) {
			t.Fatalf("port %d peers %+v; want the router pods only", port, r.From)
		}
	}
	if r := ruleFor(t, np, 8000); len(r.From) != 0 {
		t.Fatalf("engine HTTP peers %+v; want every peer", r.From)
	}
}
