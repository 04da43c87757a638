package kube

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/condisagg/condisagg/internal/kubeapi"
	"github.com/condisagg/condisagg/pool"
)

// discoveryRole is the Role the Helm chart gives the router (deploy/helm/condisagg
// templates/rbac.yaml): list and watch EndpointSlices, nothing else.
func discoveryRole(ns string) *rbacv1.Role {
	return &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "condisagg-discovery"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"},
			Verbs: []string{"list", "watch"}}}}
}

// TestAPIServer is the end-to-end test of discovery: a real kube-apiserver and etcd
// (scripts/install-kube-tools.sh; skipped without them unless CONDISAGG_KUBE_E2E=1), a router
// user bound only to the chart's Role, and a watcher that keeps a real pool in step while
// EndpointSlices are created, changed and deleted.
func TestAPIServer(t *testing.T) {
	c := kubeapi.Start(t, "condisagg")
	ctx := context.Background()
	admin := clientFor(t, c.Admin)
	const ns = "llm"
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().Roles(ns).Create(ctx, discoveryRole(ns), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "condisagg-discovery"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "condisagg-discovery"},
		Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "condisagg"}}}
	if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The router's client: a kubeconfig whose context names the namespace.
	cs, gotNS, err := NewClient(Config{Kubeconfig: c.Kubeconfig(t, "condisagg", ns)})
	if err != nil || gotNS != ns {
		t.Fatalf("NewClient = %q, %v; want namespace %s", gotNS, err, ns)
	}
	p := newPool(t)
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	prefill := Entry{Name: "prefill", Role: pool.RolePrefill, Selector: "kubernetes.io/service-name=vllm-prefill", KVEventsPort: "kv-events"}
	w, err := NewWatcher([]Entry{decodeEntry(), prefill}, p, Options{Client: cs, Namespace: gotNS, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	runWatcher(t, w)

	api := admin.DiscoveryV1().EndpointSlices(ns)
	dec := slice("vllm-decode-a", v4, allPort, ep("10.0.0.1", yes, no), ep("10.0.0.2", yes, no), ep("10.0.0.3", no, no))
	dec, err = api.Create(ctx, dec, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const d = 20 * time.Second
	waitWorkers(t, p, d, "decode@10.0.0.1:8000", "decode@10.0.0.2:8000")

	// A second slice of the same Service repeats 10.0.0.2 (counted once) and adds an IPv6
	// server; a prefill slice lacks its kv-events port and is skipped until it has it.
	dec6 := slice("vllm-decode-b", v6, allPort, ep("fd00::5", yes, no))
	if _, err := api.Create(ctx, dec6, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pre := slice("vllm-prefill-a", v4, []string{"http 8000"}, ep("10.0.1.1", yes, no))
	pre.Labels["kubernetes.io/service-name"] = "vllm-prefill"
	if pre, err = api.Create(ctx, pre, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitWorkers(t, p, d, "decode@10.0.0.1:8000", "decode@10.0.0.2:8000", "decode@[fd00::5]:8000")
	// A skipped slice changes no worker, so the count is polled (the API server is an
	// external process).
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.After(d); testutil.ToFloat64(m.Errors.WithLabelValues(ReasonMissingPort)) < 1; {
		select {
		case <-deadline:
			t.Fatalf("missing_port errors = 0 after %s, want >= 1 (the prefill slice without kv-events)", d)
		case <-tick.C:
		}
	}
	pre.Ports = append(pre.Ports, slice("", v4, []string{"kv-events 5557"}).Ports...)
	if _, err := api.Update(ctx, pre, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitWorkers(t, p, d, "decode@10.0.0.1:8000", "decode@10.0.0.2:8000", "decode@[fd00::5]:8000", "prefill@10.0.1.1:8000")
	if info := workerInfo(p, "prefill@10.0.1.1:8000"); info.KVEvents != "tcp://10.0.1.1:5557" || info.Role != pool.RolePrefill {
		t.Errorf("prefill worker = %+v", info)
	}

	// 10.0.0.1 terminates, 10.0.0.3 turns ready; then the first decode slice is deleted.
	dec.Endpoints[0].Conditions = discoveryv1Conditions(true, true)
	dec.Endpoints[2].Conditions = discoveryv1Conditions(true, false)
	if dec, err = api.Update(ctx, dec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitWorkers(t, p, d, "decode@10.0.0.2:8000", "decode@10.0.0.3:8000", "decode@[fd00::5]:8000", "prefill@10.0.1.1:8000")
	if err := api.Delete(ctx, dec.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitWorkers(t, p, d, "decode@[fd00::5]:8000", "prefill@10.0.1.1:8000")
	// The gauge is set just after the pool takes the members, so it may trail them briefly.
	for deadline := time.Now().Add(d); testutil.ToFloat64(m.Workers.WithLabelValues("decode")) != 1; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("condisagg_discovery_workers{role=decode} = %v, want 1", testutil.ToFloat64(m.Workers.WithLabelValues("decode")))
		}
	}
	// The router's user may not read anything else (the chart's Role is all it has).
	if _, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err == nil {
		t.Error("the discovery user can list pods; the Role must grant endpointslices only")
	}
}

func clientFor(t *testing.T, kubeconfig string) kubernetes.Interface {
	t.Helper()
	cs, _, err := NewClient(Config{Kubeconfig: kubeconfig})
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func workerInfo(p *pool.Pool, id string) pool.WorkerInfo {
	for _, w := range p.Workers() {
		if w.ID == id {
			return w
		}
	}
	return pool.WorkerInfo{}
}

func discoveryv1Conditions(ready, terminating bool) discoveryv1.EndpointConditions {
	return discoveryv1.EndpointConditions{Ready: ptr.To(ready), Serving: ptr.To(ready), Terminating: ptr.To(terminating)}
}
