package kube

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/condisagg/condisagg/pool"
)

// TestWatcherFakeClientset runs the watcher's real informers over client-go's fake
// clientset. It is NOT an end-to-end test: the fake has no API server, no label-selector
// filtering of watch events and no validation. TestAPIServer is the end-to-end test.
func TestWatcherFakeClientset(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset()
	p := newPool(t)
	m := NewMetrics(prometheus.NewRegistry())
	prefill := Entry{Name: "prefill", Role: pool.RolePrefill, Selector: "kubernetes.io/service-name=vllm-prefill"}
	w, err := NewWatcher([]Entry{decodeEntry(), prefill}, p, Options{Client: cs, Namespace: "llm", Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	runWatcher(t, w)
	api := cs.DiscoveryV1().EndpointSlices("llm")
	// Two ready endpoints and one not ready.
	dec := slice("vllm-decode-abc", v4, allPort, ep("10.0.0.1", yes, no), ep("10.0.0.2", nil, nil), ep("10.0.0.3", no, no))
	if _, err := api.Create(ctx, dec, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitWorkers(t, p, 10*time.Second, "decode@10.0.0.1:8000", "decode@10.0.0.2:8000")
	// The third turns ready, the first terminates.
	dec.Endpoints[2].Conditions.Ready = yes
	dec.Endpoints[0].Conditions.Terminating = yes
	if _, err := api.Update(ctx, dec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitWorkers(t, p, 10*time.Second, "decode@10.0.0.2:8000", "decode@10.0.0.3:8000")
	if got := testutil.ToFloat64(m.Workers.WithLabelValues("decode")); got != 2 {
		t.Errorf("condisagg_discovery_workers{role=decode} = %v, want 2", got)
	}
	// The slice goes away: every worker leaves.
	if err := api.Delete(ctx, dec.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitWorkers(t, p, 10*time.Second)
}

// TestNewWatcherRequires: the client, the metrics, the target and a namespace are required.
func TestNewWatcherRequires(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	if _, err := NewWatcher([]Entry{decodeEntry()}, newPool(t), Options{Metrics: m}); err == nil {
		t.Error("no client: no error")
	}
	if _, err := NewWatcher([]Entry{decodeEntry()}, newPool(t), Options{Client: fake.NewClientset(), Metrics: m}); err == nil {
		t.Error("no namespace: no error")
	}
}

// TestStripSliceCopies: the cache keeps a stripped copy, and the object it came from (which its
// source may still read: the fake clientset keeps it) is left as it was.
func TestStripSliceCopies(t *testing.T) {
	zone := "a"
	in := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "s", Annotations: map[string]string{"k": "v"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m"}}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}, Zone: &zone,
			Hints: &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "a"}}}}},
	}
	out, err := stripSlice(in)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*discoveryv1.EndpointSlice)
	if got == in || got.Annotations != nil || got.ManagedFields != nil || got.Endpoints[0].Hints != nil {
		t.Fatalf("stripped slice %+v", got)
	}
	if got.Name != "s" || got.Endpoints[0].Addresses[0] != "10.0.0.1" || *got.Endpoints[0].Zone != "a" {
		t.Fatalf("stripSlice dropped what Members reads: %+v", got)
	}
	if in.Annotations == nil || in.ManagedFields == nil || in.Endpoints[0].Hints == nil {
		t.Fatalf("stripSlice edited its input: %+v", in)
	}
}
