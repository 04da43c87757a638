package walk

import (
	"context"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"gopkg.in/yaml.v3"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/condisagg/condisagg/internal/kubeapi"
	"github.com/condisagg/condisagg/pool"
	"github.com/condisagg/condisagg/pool/kube"
)

// checkDiscovery: with the router installed with examples/discovery.yaml, the router's own
// discovery (pool/kube's watcher over the entries of the ConfigMap the chart rendered),
// authenticated as the chart's ServiceAccount with only the chart's Role, registers one worker
// per fleet pod of each role (the pods labelled app: vllm, role: <role>, docs/deploy.md §2): the
// prefill worker on the pod's `http` port (pd-sidecar), the decode worker on the engine's, with
// the engine's KV event and replay ports; and follows a decode pod that goes away. The headless
// Services the static workers of examples/common.yaml name hold the same pods on the ports those
// workers dial.
func checkDiscovery(ctx context.Context, t *testing.T, c *kubeapi.Cluster, admin kubernetes.Interface, st *standIn) {
	t.Helper()
	dep, err := admin.AppsV1().Deployments(namespace).Get(ctx, routerRelease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm, err := admin.CoreV1().ConfigMaps(namespace).Get(ctx, routerRelease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Discovery struct {
			Kubernetes *kube.Config `yaml:"kubernetes"`
		} `yaml:"discovery"`
	}
	if err := yaml.Unmarshal([]byte(cm.Data["condisagg.yaml"]), &file); err != nil {
		t.Fatal(err)
	}
	dc := file.Discovery.Kubernetes
	if dc == nil || len(dc.Workers) != 2 {
		t.Fatalf("the installed router has no discovery block of two entries (the last install of docs/deploy.md §5 must add examples/discovery.yaml): %+v", dc)
	}

	// The router's identity: a token of the ServiceAccount its pod runs as, as the kubelet would
	// mount it, in a kubeconfig whose context names the namespace (in cluster: the pod's).
	sa := dep.Spec.Template.Spec.ServiceAccountName
	tr, err := admin.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, sa,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: new(int64(600))}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token of ServiceAccount %s: %v", sa, err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q, insecure-skip-tls-verify: true}}]
users: [{name: router, user: {token: %q}}]
contexts: [{name: c, context: {cluster: c, user: router, namespace: %s}}]
current-context: c
`, c.Host, tr.Status.Token, namespace), 0o600); err != nil {
		t.Fatal(err)
	}
	cs, ns, err := kube.NewClient(kube.Config{Kubeconfig: kubeconfig})
	if err != nil || ns != namespace {
		t.Fatalf("NewClient = %q, %v; want namespace %s", ns, err, namespace)
	}
	p, err := pool.New(pool.Config{HealthInterval: -1}, pool.Options{Metrics: pool.NewMetrics(prometheus.NewRegistry())})
	if err != nil {
		t.Fatal(err)
	}
	wt, err := kube.NewWatcher(dc.Workers, p, kube.Options{Client: cs, Namespace: ns, Metrics: kube.NewMetrics(prometheus.NewRegistry())})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- wt.Run(wctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("watcher Run = %v", err)
		}
	}()

	want, pods := expectedWorkers(ctx, t, admin, dc.Workers)
	waitWorkers(t, p, 20*time.Second, want)
	t.Logf("discovery as ServiceAccount %s: %d workers, one per fleet pod: %v", sa, len(want), slices.Sorted(maps.Keys(want)))
	if _, err := cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{}); err == nil {
		t.Error("the router's ServiceAccount may list pods; the chart's Role must grant EndpointSlices only")
	}
	checkHeadless(ctx, t, admin, pods)

	// A decode pod goes away (its Deployment scaled down): the slice controller drops it and
	// discovery follows.
	d, err := admin.AppsV1().Deployments(namespace).Get(ctx, "vllm-decode", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d.Spec.Replicas = new(*d.Spec.Replicas - 1)
	if _, err := admin.AppsV1().Deployments(namespace).Update(ctx, d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	st.sync(ctx, t)
	want, _ = expectedWorkers(ctx, t, admin, dc.Workers)
	waitWorkers(t, p, 20*time.Second, want)
}

// expectedWorkers is what discovery must register for the fleet's pods: per entry, one worker
// per pod labelled app: vllm, role: <entry's role>, at its IP and the ports its containers name
// http, kv-events and kv-replay. It returns the workers by id, and the pods by role.
func expectedWorkers(ctx context.Context, t *testing.T, cs kubernetes.Interface, entries []kube.Entry) (map[string]worker, map[pool.Role][]corev1.Pod) {
	t.Helper()
	want := map[string]worker{}
	byRole := map[pool.Role][]corev1.Pod{}
	for _, e := range entries {
		list, err := cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: "app=vllm,role=" + string(e.Role)})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Items) == 0 {
			t.Fatalf("no pod labelled app=vllm,role=%s: the fleet of §2a is not installed", e.Role)
		}
		byRole[e.Role] = list.Items
		for _, pod := range list.Items {
			ip := pod.Status.PodIP
			http, who := containerPort(&pod, "http")
			if want := map[pool.Role]string{pool.RolePrefill: "pd-sidecar", pool.RoleDecode: "engine"}[e.Role]; who != want {
				t.Errorf("pod %s: port http is container %q's; want %s's", pod.Name, who, want)
			}
			events, _ := containerPort(&pod, "kv-events")
			replay, _ := containerPort(&pod, "kv-replay")
			want[e.Name+"@"+net.JoinHostPort(ip, strconv.Itoa(int(http)))] = worker{role: e.Role,
				kvEvents: "tcp://" + net.JoinHostPort(ip, strconv.Itoa(int(events))),
				kvReplay: "tcp://" + net.JoinHostPort(ip, strconv.Itoa(int(replay)))}
		}
	}
	return want, byRole
}

// worker is what the test compares of a discovered worker.
type worker struct {
	role               pool.Role
	kvEvents, kvReplay string
}

// waitWorkers waits until p's workers are want (ids, roles, KV event and replay endpoints).
func waitWorkers(t *testing.T, p *pool.Pool, d time.Duration, want map[string]worker) {
	t.Helper()
	deadline := time.After(d)
	for {
		ch := p.Changed()
		got := map[string]worker{}
		for _, w := range p.Workers() {
			got[w.ID] = worker{role: w.Role, kvEvents: w.KVEvents, kvReplay: w.KVReplay}
		}
		if fmt.Sprint(got) == fmt.Sprint(want) {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("discovered workers after %s:\n%v\nwant:\n%v", d, got, want)
		}
	}
}

// checkHeadless: the headless Services of examples/common.yaml's static workers
// (vllm-<role>-pods, resolved by cluster DNS to the addresses of their EndpointSlices) hold every
// pod of the role, on the ports the workers dial: the HTTP port (8100 prefill, 8000 decode), 5557
// and 5567.
func checkHeadless(ctx context.Context, t *testing.T, cs kubernetes.Interface, pods map[pool.Role][]corev1.Pod) {
	t.Helper()
	for role, port := range map[pool.Role]int32{pool.RolePrefill: 8100, pool.RoleDecode: 8000} {
		svc := "vllm-" + string(role) + "-pods"
		list, err := cs.DiscoveryV1().EndpointSlices(namespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc})
		if err != nil {
			t.Fatal(err)
		}
		var addrs []string
		ports := map[int32]bool{}
		for _, sl := range list.Items {
			for _, ep := range sl.Endpoints {
				if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
					addrs = append(addrs, ep.Addresses...)
				}
			}
			for _, p := range sl.Ports {
				ports[*p.Port] = true
			}
		}
		var want []string
		for _, p := range pods[role] {
			want = append(want, p.Status.PodIP)
		}
		slices.Sort(addrs)
		slices.Sort(want)
		if !slices.Equal(addrs, want) || !ports[port] || !ports[5557] || !ports[5567] {
			t.Errorf("Service %s: slices hold %v on ports %v; want the %s pods %v on %d, 5557, 5567", svc, addrs, ports, role, want, port)
		}
	}
}

// containerPort is the number of the container port named name, and its container.
func containerPort(pod *corev1.Pod, name string) (int32, string) {
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == name {
				return p.ContainerPort, c.Name
			}
		}
	}
	return 0, ""
}
