package helm

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	egv1a1 "github.com/envoyproxy/gateway/api/v1alpha1"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	istioapiv1alpha3 "istio.io/api/networking/v1alpha3"
	istioapisecurity "istio.io/api/security/v1beta1"
	istiov1 "istio.io/client-go/pkg/apis/networking/v1"
	istiov1alpha3 "istio.io/client-go/pkg/apis/networking/v1alpha3"
	istiosecurityv1 "istio.io/client-go/pkg/apis/security/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	giev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	sigsjson "sigs.k8s.io/json"
)

// apiTypes maps apiVersion/kind to a new value of its Go API type: every kind the chart renders.
var apiTypes = map[string]func() any{
	"v1/ConfigMap":                      func() any { return new(corev1.ConfigMap) },
	"v1/Secret":                         func() any { return new(corev1.Secret) },
	"v1/Service":                        func() any { return new(corev1.Service) },
	"v1/ServiceAccount":                 func() any { return new(corev1.ServiceAccount) },
	"rbac.authorization.k8s.io/v1/Role": func() any { return new(rbacv1.Role) },
	"rbac.authorization.k8s.io/v1/RoleBinding":            func() any { return new(rbacv1.RoleBinding) },
	"apps/v1/Deployment":                                  func() any { return new(appsv1.Deployment) },
	"policy/v1/PodDisruptionBudget":                       func() any { return new(policyv1.PodDisruptionBudget) },
	"monitoring.coreos.com/v1/ServiceMonitor":             func() any { return new(monitoringv1.ServiceMonitor) },
	"monitoring.coreos.com/v1/PrometheusRule":             func() any { return new(monitoringv1.PrometheusRule) },
	"networking.istio.io/v1/Gateway":                      func() any { return new(istiov1.Gateway) },
	"networking.istio.io/v1/VirtualService":               func() any { return new(istiov1.VirtualService) },
	"networking.istio.io/v1alpha3/EnvoyFilter":            func() any { return new(istiov1alpha3.EnvoyFilter) },
	"networking.istio.io/v1/DestinationRule":              func() any { return new(istiov1.DestinationRule) },
	"gateway.networking.k8s.io/v1/Gateway":                func() any { return new(gatewayv1.Gateway) },
	"gateway.networking.k8s.io/v1/HTTPRoute":              func() any { return new(gatewayv1.HTTPRoute) },
	"gateway.envoyproxy.io/v1alpha1/EnvoyProxy":           func() any { return new(egv1a1.EnvoyProxy) },
	"gateway.envoyproxy.io/v1alpha1/EnvoyExtensionPolicy": func() any { return new(egv1a1.EnvoyExtensionPolicy) },
	"gateway.envoyproxy.io/v1alpha1/BackendTrafficPolicy": func() any { return new(egv1a1.BackendTrafficPolicy) },
	"gateway.envoyproxy.io/v1alpha1/ClientTrafficPolicy":  func() any { return new(egv1a1.ClientTrafficPolicy) },
	"inference.networking.k8s.io/v1/InferencePool":        func() any { return new(giev1.InferencePool) },
	"security.istio.io/v1/PeerAuthentication":             func() any { return new(istiosecurityv1.PeerAuthentication) },
	"networking.k8s.io/v1/NetworkPolicy":                  func() any { return new(networkingv1.NetworkPolicy) },
}

// istioSpecs: the Istio client types decode their spec with unknown fields allowed, so the spec is
// decoded a second time, strictly, into its protobuf message.
var istioSpecs = map[string]func() proto.Message{
	"networking.istio.io/v1/Gateway":           func() proto.Message { return new(istioapiv1alpha3.Gateway) },
	"networking.istio.io/v1/VirtualService":    func() proto.Message { return new(istioapiv1alpha3.VirtualService) },
	"networking.istio.io/v1alpha3/EnvoyFilter": func() proto.Message { return new(istioapiv1alpha3.EnvoyFilter) },
	"networking.istio.io/v1/DestinationRule":   func() proto.Message { return new(istioapiv1alpha3.DestinationRule) },
	"security.istio.io/v1/PeerAuthentication":  func() proto.Message { return new(istioapisecurity.PeerAuthentication) },
}

// decodeStrict decodes o into its Go API type; unknown, misspelt (case included) and duplicate
// fields are errors.
func decodeStrict(o object) (any, error) {
	gvk := o.APIVersion + "/" + o.Kind
	newType, ok := apiTypes[gvk]
	if !ok {
		return nil, &unknownKindError{gvk}
	}
	v := newType()
	strict, err := sigsjson.UnmarshalStrict(o.JSON, v, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	if err != nil {
		return nil, err
	}
	if len(strict) > 0 {
		return nil, joinErrors(strict)
	}
	if newSpec, ok := istioSpecs[gvk]; ok {
		spec, err := json.Marshal(o.Doc["spec"])
		if err != nil {
			return nil, err
		}
		if err := (protojson.UnmarshalOptions{}).Unmarshal(spec, newSpec()); err != nil {
			return nil, err
		}
	}
	return v, nil
}

type unknownKindError struct{ gvk string }

func (e *unknownKindError) Error() string { return "no Go API type for " + e.gvk + " in apiTypes" }

type strictErrors []error

func (e strictErrors) Error() string {
	var s []string
	for _, err := range e {
		s = append(s, err.Error())
	}
	return strings.Join(s, "; ")
}

func joinErrors(errs []error) error { return strictErrors(errs) }

// TestChartObjectsDecodeStrictly renders every variant and decodes every object strictly into its
// Go API type.
func TestChartObjectsDecodeStrictly(t *testing.T) {
	want := map[string][]string{
		"no_gateway": {"ConfigMap/condisagg", "Deployment/condisagg", "PodDisruptionBudget/condisagg", "Service/condisagg", "ServiceMonitor/condisagg",
			"PrometheusRule/condisagg", "ConfigMap/condisagg-dashboard"},
		"plain_envoy":             {"ConfigMap/condisagg-envoy", "Deployment/condisagg-envoy", "Service/condisagg-envoy", "PodDisruptionBudget/condisagg-envoy"},
		"plain_envoy_full_duplex": {"ConfigMap/condisagg-envoy", "Deployment/condisagg-envoy", "Service/condisagg-envoy", "PodDisruptionBudget/condisagg-envoy"},
		"istio":                   {"EnvoyFilter/condisagg", "DestinationRule/condisagg", "Gateway/llm", "VirtualService/llm", "PeerAuthentication/condisagg-workers"},
		"envoy_gateway": {"BackendTrafficPolicy/condisagg", "ClientTrafficPolicy/condisagg", "EnvoyExtensionPolicy/condisagg",
			"EnvoyProxy/condisagg", "Gateway/llm", "HTTPRoute/llm"},
		"inference_pool": {"InferencePool/vllm", "HTTPRoute/llm"},
		"pod_knobs":      {"Deployment/condisagg-envoy", "PodDisruptionBudget/condisagg-envoy"},
	}
	for _, v := range variants() {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			objs := render(t, v)
			var keys []string
			for _, o := range objs {
				if _, err := decodeStrict(o); err != nil {
					t.Errorf("%s %s: %v", o.APIVersion, o.key(), err)
				}
				keys = append(keys, o.key())
			}
			for _, k := range append(slices.Clone(want["no_gateway"]), want[v.name]...) {
				if !slices.Contains(keys, k) {
					t.Errorf("rendered %v; missing %s", keys, k)
				}
			}
			// The chart writes a token Secret only for admin.token.value; the examples name an
			// existing one.
			if got, wantSecret := slices.Contains(keys, "Secret/condisagg-admin-token"), v.name == "token_value"; got != wantSecret {
				t.Errorf("rendered Secret/condisagg-admin-token = %v; want %v", got, wantSecret)
			}
		})
	}
}

// TestStrictDecodingRefusesMisspeltFields: the decoder used above does fail on a misspelt or
// unknown field, in a core type, in a CRD type and in an Istio spec.
func TestStrictDecodingRefusesMisspeltFields(t *testing.T) {
	objs := render(t, variantNamed(t, "istio"))
	cases := map[string]struct {
		kind, name string
		edit       func(map[string]any)
	}{
		"deployment_replicas_typo": {"Deployment", "condisagg", func(d map[string]any) { d["spec"].(map[string]any)["replica"] = 1 }},
		"service_port_case":        {"Service", "condisagg", func(d map[string]any) { d["spec"].(map[string]any)["Type"] = "ClusterIP" }},
		"prometheusrule_unknown":   {"PrometheusRule", "condisagg", func(d map[string]any) { d["spec"].(map[string]any)["group"] = []any{} }},
		"servicemonitor_unknown":   {"ServiceMonitor", "condisagg", func(d map[string]any) { d["spec"].(map[string]any)["endpoint"] = []any{} }},
		"envoyfilter_spec_unknown": {"EnvoyFilter", "condisagg", func(d map[string]any) { d["spec"].(map[string]any)["configPatch"] = []any{} }},
		// Envoy's name of the field, singular: Istio's is consecutiveLocalOriginFailures.
		"destinationrule_envoy_name": {"DestinationRule", "condisagg", func(d map[string]any) {
			od := d["spec"].(map[string]any)["trafficPolicy"].(map[string]any)["outlierDetection"].(map[string]any)
			od["consecutiveLocalOriginFailure"] = od["consecutiveLocalOriginFailures"]
			delete(od, "consecutiveLocalOriginFailures")
		}},
		"peerauthentication_case": {"PeerAuthentication", "condisagg-workers", func(d map[string]any) {
			spec := d["spec"].(map[string]any)
			spec["portLevelMTLS"] = spec["portLevelMtls"]
			delete(spec, "portLevelMtls")
		}},
		"peerauthentication_mode_value": {"PeerAuthentication", "condisagg-workers", func(d map[string]any) {
			d["spec"].(map[string]any)["portLevelMtls"].(map[string]any)["8000"] = map[string]any{"mode": "PERMISIVE"}
		}},
		"extproc_backendsettings_typo": {"EnvoyExtensionPolicy", "condisagg", func(d map[string]any) {
			e := d["spec"].(map[string]any)["extProc"].([]any)[0].(map[string]any)
			e["backendSettings"].(map[string]any)["healthCheck"].(map[string]any)["passive"].(map[string]any)["consecutive5xxErrors"] = 5
		}},
		"inferencepool_picker_typo": {"InferencePool", "vllm", func(d map[string]any) {
			d["spec"].(map[string]any)["endpointPickerRef"].(map[string]any)["failuremode"] = "FailOpen"
		}},
	}
	poolObjs := render(t, variantNamed(t, "inference_pool"))
	egObjs := render(t, variantNamed(t, "envoy_gateway"))
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			from := objs
			switch c.kind {
			case "InferencePool":
				from = poolObjs
			case "EnvoyExtensionPolicy":
				from = egObjs
			}
			o := find(t, from, c.kind, c.name)
			var doc map[string]any
			if err := json.Unmarshal(o.JSON, &doc); err != nil {
				t.Fatal(err)
			}
			c.edit(doc)
			o.Doc = doc
			var err error
			if o.JSON, err = json.Marshal(doc); err != nil {
				t.Fatal(err)
			}
			if _, err := decodeStrict(o); err == nil {
				t.Errorf("%s with a misspelt field decoded without error", o.key())
			}
		})
	}
}

// TestChartLints: `helm lint --strict` passes with each gateway's example values.
func TestChartLints(t *testing.T) {
	for _, gw := range []string{"plain-envoy.yaml", "istio.yaml", "envoy-gateway.yaml", "inference-pool.yaml"} {
		t.Run(gw, func(t *testing.T) {
			t.Parallel()
			if _, err := helmRun(t, "lint", chartDir, "--strict", "--namespace", namespace,
				"-f", "examples/common.yaml", "-f", "examples/"+gw); err != nil {
				t.Error(err)
			}
		})
	}
}
