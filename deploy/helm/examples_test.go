package helm

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/condisagg/condisagg/internal/repo"
)

// exampleObjects loads a manifest of envoy/examples (relative to the repository root).
func exampleObjects(t *testing.T, rel string) []object {
	t.Helper()
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return splitObjects(t, raw)
}

// sameJSON compares two generic documents.
func sameJSON(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	var va, vb any
	_ = json.Unmarshal(ja, &va)
	_ = json.Unmarshal(jb, &vb)
	return reflect.DeepEqual(va, vb)
}

// TestChartGatewaysMatchExamples renders the chart with the example values of each gateway and
// compares every gateway object with the object of the same kind and name in envoy/examples:
// same namespace, same spec. The Services of the fleet (vllm-decode, pd-sidecar) are not the
// chart's; of the condisagg Service the ext_proc port must match. So the chart cannot drift from
// the examples the envoy package validates.
func TestChartGatewaysMatchExamples(t *testing.T) {
	cases := []struct {
		name, values, example string
		kinds                 []string
	}{
		{"istio", "istio.yaml", "envoy/examples/istio/condisagg-istio.yaml",
			[]string{"Gateway", "VirtualService", "DestinationRule", "EnvoyFilter", "PeerAuthentication"}},
		{"envoy_gateway", "envoy-gateway.yaml", "envoy/examples/envoy-gateway/condisagg-envoy-gateway.yaml",
			[]string{"Gateway", "HTTPRoute", "EnvoyProxy", "EnvoyExtensionPolicy", "BackendTrafficPolicy", "ClientTrafficPolicy"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			chart := render(t, variant{values: []string{"common.yaml", c.values}})
			compared := 0
			for _, ex := range exampleObjects(t, c.example) {
				if ex.Kind == "Service" {
					if ex.Name == release {
						compareExtProcPort(t, chart, ex)
					}
					continue
				}
				if !contains(c.kinds, ex.Kind) {
					t.Errorf("example %s %s is not compared: add its kind to the chart and this test", ex.APIVersion, ex.key())
					continue
				}
				got := find(t, chart, ex.Kind, ex.Name)
				if got.APIVersion != ex.APIVersion || got.Namespace != ex.Namespace {
					t.Errorf("%s: chart %s in %q; example %s in %q", ex.key(), got.APIVersion, got.Namespace, ex.APIVersion, ex.Namespace)
				}
				if !sameJSON(got.Doc["spec"], ex.Doc["spec"]) {
					g, _ := json.MarshalIndent(got.Doc["spec"], "", " ")
					w, _ := json.MarshalIndent(ex.Doc["spec"], "", " ")
					t.Errorf("%s spec differs from the example:\n%s", ex.key(), firstDiff(string(g), string(w)))
				}
				compared++
			}
			if compared != len(c.kinds) {
				t.Errorf("compared %d objects; want %d (%v)", compared, len(c.kinds), c.kinds)
			}
		})
	}
	t.Run("plain_envoy", func(t *testing.T) {
		t.Parallel()
		root, err := repo.Root()
		if err != nil {
			t.Fatal(err)
		}
		for mode, file := range map[string]string{"buffered": "bootstrap-buffered.yaml", "full-duplex": "bootstrap-full-duplex.yaml"} {
			chart := render(t, variant{values: []string{"common.yaml", "plain-envoy.yaml"}, set: []string{"gateway.envoy.mode=" + mode}})
			want, err := os.ReadFile(filepath.Join(root, "envoy", "examples", "plain-envoy", file))
			if err != nil {
				t.Fatal(err)
			}
			if got := bootstrapOf(t, chart, release); got != string(want) {
				t.Errorf("%s: chart bootstrap differs from envoy/examples/plain-envoy/%s:\n%s", mode, file, firstDiff(got, string(want)))
			}
		}
	})
}

// compareExtProcPort: the chart's condisagg Service publishes the example's ext_proc port with the
// same appProtocol (grpc for Istio, kubernetes.io/h2c for Envoy Gateway).
func compareExtProcPort(t *testing.T, chart []object, ex object) {
	t.Helper()
	want := dig(t, ex.Doc, "spec", "ports", 0).(map[string]any)
	got, ok := servicePorts(t, chart)[want["name"].(string)]
	if !ok {
		t.Fatalf("chart Service %s has no port %v", release, want["name"])
	}
	if float64(got.Port) != want["port"] || got.AppProtocol == nil || *got.AppProtocol != want["appProtocol"] ||
		float64(got.TargetPort.IntValue()) != want["targetPort"] {
		t.Errorf("chart Service port %+v; example %v", got, want)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
