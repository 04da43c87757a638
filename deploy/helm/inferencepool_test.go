package helm

import (
	"net"
	"strconv"
	"testing"

	"gopkg.in/yaml.v3"
	corev1 "k8s.io/api/core/v1"
	giev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// TestChartInferencePool: the inference-pool variant's InferencePool names the condisagg Service
// and the port its ext_proc listens on as the endpoint picker, fails closed by default, selects
// the fleet's pods and has every worker endpoint port of the serve config among its target ports
// (the endpoints condisagg names are pool endpoints); the HTTPRoute sends everything to the pool.
func TestChartInferencePool(t *testing.T) {
	objs := render(t, variantNamed(t, "inference_pool"))
	v, err := decodeStrict(find(t, objs, "InferencePool", "vllm"))
	if err != nil {
		t.Fatal(err)
	}
	pool := v.(*giev1.InferencePool)
	ref := pool.Spec.EndpointPickerRef
	if ref == nil || ref.Kind != "Service" || string(ref.Name) != release || ref.Port == nil || ref.FailureMode != giev1.EndpointPickerFailClose {
		t.Fatalf("endpointPickerRef %+v; want Service %s, a port, FailClose", ref, release)
	}
	sv, err := decodeStrict(find(t, objs, "Service", release))
	if err != nil {
		t.Fatal(err)
	}
	var extProc *corev1.ServicePort
	for i, p := range sv.(*corev1.Service).Spec.Ports {
		if p.Name == "grpc-extproc" {
			extProc = &sv.(*corev1.Service).Spec.Ports[i]
		}
	}
	if extProc == nil || int32(ref.Port.Number) != extProc.Port {
		t.Fatalf("picker port %v; the Service's ext_proc port is %+v", ref.Port, extProc)
	}
	_, c := routerPod(t, objs)
	listening := false
	for _, p := range c.Ports {
		listening = listening || (p.Name == "grpc-extproc" && p.ContainerPort == extProc.TargetPort.IntVal)
	}
	if !listening {
		t.Fatalf("container ports %+v: none is the Service's ext_proc target %v", c.Ports, extProc.TargetPort)
	}
	if got := pool.Spec.Selector.MatchLabels; len(got) != 1 || got["app"] != "vllm" {
		t.Fatalf("selector %v; want the fleet's app: vllm", got)
	}
	ports := map[string]bool{}
	for _, p := range pool.Spec.TargetPorts {
		ports[strconv.Itoa(int(p.Number))] = true
	}
	text, _ := serveConfigText(t, objs, c)
	var cfg struct {
		Workers []struct {
			Name     string `yaml:"name"`
			Endpoint string `yaml:"endpoint"`
		} `yaml:"workers"`
	}
	if err := yaml.Unmarshal([]byte(text), &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Workers) < 2 {
		t.Fatalf("serve config lists %d workers", len(cfg.Workers))
	}
	for _, w := range cfg.Workers {
		_, port, err := net.SplitHostPort(w.Endpoint)
		if err != nil || !ports[port] {
			t.Errorf("worker %s endpoint %s: port not among the pool's target ports %v", w.Name, w.Endpoint, pool.Spec.TargetPorts)
		}
	}
	rv, err := decodeStrict(find(t, objs, "HTTPRoute", "llm"))
	if err != nil {
		t.Fatal(err)
	}
	rules := rv.(*gatewayv1.HTTPRoute).Spec.Rules
	if len(rules) != 1 || len(rules[0].BackendRefs) != 1 {
		t.Fatalf("rules %+v; want one rule with one backend", rules)
	}
	b := rules[0].BackendRefs[0]
	if b.Group == nil || string(*b.Group) != giev1.GroupName || b.Kind == nil || *b.Kind != "InferencePool" || string(b.Name) != pool.Name {
		t.Fatalf("backendRef %+v; want the InferencePool %s", b.BackendObjectReference, pool.Name)
	}
}
