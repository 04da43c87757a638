package walk

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/endpointslice"
	endpointsliceutil "k8s.io/endpointslice/util"
	"k8s.io/klog/v2"
)

// standInLabel marks the pods the stand-in created, with the name of their Deployment.
const standInLabel = "walk.condisagg.io/deployment"

// controllerName is the EndpointSlice controller's: its slices carry it as
// endpointslice.kubernetes.io/managed-by, as in a cluster.
const controllerName = "endpointslice-controller.k8s.io"

// standIn does, for one namespace, what the components that do not run here would do with the
// objects the walk-through installs: the ServiceAccount controller (the namespace's "default"
// account), the Deployment and ReplicaSet controllers with the scheduler (each Deployment's
// replicas as pods from its template, bound to a node), the kubelet (each pod Running and Ready
// with an address), the EndpointSlice controller (its own reconciler, k8s.io/endpointslice) and
// the garbage collector (pods and slices whose Deployment or Service is gone). It writes
// everything through the API server, which validates and admits it as it would the
// controllers' writes.
type standIn struct {
	cs    kubernetes.Interface
	ns    string
	nodes []string
	rec   *endpointslice.Reconciler
	ips   int // pod addresses handed out
}

func newStandIn(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns string) *standIn {
	t.Helper()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	s := &standIn{cs: cs, ns: ns}
	for i, zone := range []string{"zone-a", "zone-b"} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%d", i),
			Labels: map[string]string{corev1.LabelTopologyZone: zone, corev1.LabelHostname: fmt.Sprintf("node-%d", i)}}}
		n, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{FieldValidation: "Strict"})
		if err != nil {
			t.Fatal(err)
		}
		if err := idx.Add(n); err != nil {
			t.Fatal(err)
		}
		s.nodes = append(s.nodes, n.Name)
	}
	s.rec = endpointslice.NewReconciler(cs, corelisters.NewNodeLister(idx), 100,
		endpointsliceutil.NewEndpointSliceTracker(), nil, &record.FakeRecorder{}, controllerName) // events dropped: nil Events channel
	return s
}

// sync brings the namespace's pods and EndpointSlices in line with its Deployments and Services.
func (s *standIn) sync(ctx context.Context, t *testing.T) {
	t.Helper()
	if _, err := s.cs.CoreV1().Namespaces().Get(ctx, s.ns, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		return // the walk has not created it yet
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: s.ns}}
	if _, err := s.cs.CoreV1().ServiceAccounts(s.ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	deps, err := s.cs.AppsV1().Deployments(s.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, d := range deps.Items {
		replicas := 1
		if d.Spec.Replicas != nil {
			replicas = int(*d.Spec.Replicas)
		}
		for i := range replicas {
			name := fmt.Sprintf("%s-%d", d.Name, i)
			want[name] = true
			if _, err := s.cs.CoreV1().Pods(s.ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
				continue
			}
			s.startPod(ctx, t, &d.Spec.Template, d.Name, name, i)
		}
	}
	pods, err := s.cs.CoreV1().Pods(s.ns).List(ctx, metav1.ListOptions{LabelSelector: standInLabel})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if !want[p.Name] {
			// Grace period 0: the kubelet that would confirm a graceful deletion does not run,
			// and a pod left terminating would keep its name.
			if err := s.cs.CoreV1().Pods(s.ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))}); err != nil {
				t.Fatal(err)
			}
		}
	}
	s.reconcileSlices(ctx, t)
}

// startPod creates pod name from tmpl on a node and reports it Running and Ready.
func (s *standIn) startPod(ctx context.Context, t *testing.T, tmpl *corev1.PodTemplateSpec, deployment, name string, i int) {
	t.Helper()
	lbl := maps.Clone(tmpl.Labels)
	lbl[standInLabel] = deployment
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.ns, Labels: lbl, Annotations: tmpl.Annotations},
		Spec: *tmpl.Spec.DeepCopy()}
	pod.Spec.NodeName = s.nodes[i%len(s.nodes)]
	pod, err := s.cs.CoreV1().Pods(s.ns).Create(ctx, pod, metav1.CreateOptions{FieldValidation: "Strict"})
	if err != nil {
		t.Fatalf("pod %s of Deployment %s: %v", name, deployment, err)
	}
	s.ips++
	ip := fmt.Sprintf("10.244.%d.%d", s.ips/250, s.ips%250+2)
	now := metav1.NewTime(time.Now())
	var statuses []corev1.ContainerStatus
	for _, c := range pod.Spec.Containers {
		statuses = append(statuses, corev1.ContainerStatus{Name: c.Name, Image: c.Image, Ready: true, Started: new(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}})
	}
	cond := func(ty corev1.PodConditionType) corev1.PodCondition {
		return corev1.PodCondition{Type: ty, Status: corev1.ConditionTrue, LastTransitionTime: now}
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
		HostIP: "192.168.0.1", HostIPs: []corev1.HostIP{{IP: "192.168.0.1"}}, StartTime: &now, ContainerStatuses: statuses,
		Conditions: []corev1.PodCondition{cond(corev1.PodScheduled), cond(corev1.PodInitialized), cond(corev1.ContainersReady), cond(corev1.PodReady)}}
	if _, err := s.cs.CoreV1().Pods(s.ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{FieldValidation: "Strict"}); err != nil {
		t.Fatalf("status of pod %s: %v", name, err)
	}
}

// reconcileSlices runs the EndpointSlice controller's reconciler for every Service with a
// selector, over the pods the API server selects for it, and deletes the slices of Services
// that are gone.
func (s *standIn) reconcileSlices(ctx context.Context, t *testing.T) {
	t.Helper()
	svcs, err := s.cs.CoreV1().Services(s.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	live := map[string]bool{}
	for i := range svcs.Items {
		svc := &svcs.Items[i]
		live[svc.Name] = true
		if svc.Spec.Selector == nil {
			continue
		}
		pods, err := s.cs.CoreV1().Pods(s.ns).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(svc.Spec.Selector).String()})
		if err != nil {
			t.Fatal(err)
		}
		slices, err := s.cs.DiscoveryV1().EndpointSlices(s.ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc.Name})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.rec.Reconcile(klog.Background(), svc, ptrs(pods.Items), ptrs(slices.Items), time.Now()); err != nil {
			t.Fatalf("EndpointSlices of Service %s: %v", svc.Name, err)
		}
	}
	all, err := s.cs.DiscoveryV1().EndpointSlices(s.ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelManagedBy + "=" + controllerName})
	if err != nil {
		t.Fatal(err)
	}
	for _, sl := range all.Items {
		if !live[sl.Labels[discoveryv1.LabelServiceName]] {
			if err := s.cs.DiscoveryV1().EndpointSlices(s.ns).Delete(ctx, sl.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func ptrs[T any](items []T) []*T {
	out := make([]*T, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	return out
}
