package helm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/condisagg/condisagg/deploy/internal/tools"
)

// Every render uses this release name and namespace, as docs/deploy.md does; with them the
// chart's names equal the envoy/examples objects' names.
const (
	release   = "condisagg"
	namespace = "llm"
	chartDir  = "condisagg"
)

// variant is one set of values files under examples/ plus --set overrides.
type variant struct {
	name   string
	values []string
	set    []string
}

func (v variant) args() []string {
	args := []string{"template", release, chartDir, "--namespace", namespace}
	for _, f := range v.values {
		if !strings.Contains(f, "/") { // a file of examples/; else a path from deploy/helm
			f = filepath.Join("examples", f)
		}
		args = append(args, "-f", f)
	}
	for _, s := range v.set {
		args = append(args, "--set", s)
	}
	return args
}

// variants are the renders every strict-decoding and config test covers.
func variants() []variant {
	return []variant{
		{name: "no_gateway", values: []string{"common.yaml"}},
		{name: "plain_envoy", values: []string{"common.yaml", "plain-envoy.yaml"}},
		{name: "plain_envoy_full_duplex", values: []string{"common.yaml", "plain-envoy.yaml"}, set: []string{"gateway.envoy.mode=full-duplex"}},
		{name: "istio", values: []string{"common.yaml", "istio.yaml"}},
		{name: "envoy_gateway", values: []string{"common.yaml", "envoy-gateway.yaml"}},
		{name: "admin_grpc_exposed", values: []string{"common.yaml"}, set: []string{"admin.grpc.expose=true"}},
		{name: "existing_token_secret", values: []string{"common.yaml"}, set: []string{"admin.token.existingSecret=ops-token", "admin.token.secretKey=bearer"}},
		{name: "kubernetes_discovery", values: []string{"common.yaml", "discovery.yaml"}},
		{name: "inference_pool", values: []string{"common.yaml", "inference-pool.yaml"}},
		{name: "token_value", values: []string{"common.yaml"}, set: []string{"admin.token.existingSecret=", "admin.token.value=" + testToken}},
		{name: "pod_knobs", values: []string{"common.yaml", "plain-envoy.yaml", "testdata/knobs.yaml"}},
		{name: "warm_start", values: []string{"common.yaml"}, set: []string{"admin.grpc.expose=true", "warmStart.enabled=true", "networkPolicy.enabled=true"}},
		{name: "hub_tokenizer", values: []string{"common.yaml"}, set: []string{"model.volume=null", "model.hub=" + hubModel, "model.hubToken.existingSecret=hf-token"}},
	}
}

// hubModel is the model.hub of the hub_tokenizer variant.
const hubModel = "hf:Qwen/Qwen3-8B"

// testToken is the admin.token.value of the token_value variant.
const testToken = "0f1e2d3c4b5a69788796a5b4c3d2e1f0"

// object is one rendered document.
type object struct {
	APIVersion, Kind, Name, Namespace string
	JSON                              []byte         // the document, as JSON
	Doc                               map[string]any // the same, decoded generically
}

func (o object) key() string { return o.Kind + "/" + o.Name }

// helmRun runs helm with args and returns its stdout, or the error with its stderr.
func helmRun(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	bin, err := tools.Find("helm")
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.Bytes(), nil
}

// render renders v and splits the output into objects, failing the test on any error.
func render(t *testing.T, v variant) []object {
	t.Helper()
	out, err := helmRun(t, v.args()...)
	if err != nil {
		t.Fatal(err)
	}
	return splitObjects(t, out)
}

// docSep separates the documents of helm's output ("---" on its own line).
var docSep = regexp.MustCompile(`(?m)^---[ \t]*$`)

func splitObjects(t *testing.T, out []byte) []object {
	t.Helper()
	var objs []object
	for i, doc := range docSep.Split(string(out), -1) {
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		js, err := yaml.YAMLToJSONStrict([]byte(doc))
		if err != nil {
			t.Fatalf("document %d: %v\n%s", i, err, doc)
		}
		var m map[string]any
		if err := json.Unmarshal(js, &m); err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		meta, _ := m["metadata"].(map[string]any)
		o := object{JSON: js, Doc: m}
		o.APIVersion, _ = m["apiVersion"].(string)
		o.Kind, _ = m["kind"].(string)
		o.Name, _ = meta["name"].(string)
		o.Namespace, _ = meta["namespace"].(string)
		objs = append(objs, o)
	}
	return objs
}

// stripComments drops whole-line YAML comments (helm's "# Source:" lines).
func stripComments(doc string) string {
	var keep []string
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// find returns the object of the given kind and name, failing the test if there is none.
func find(t *testing.T, objs []object, kind, name string) object {
	t.Helper()
	for _, o := range objs {
		if o.Kind == kind && o.Name == name {
			return o
		}
	}
	t.Fatalf("no %s %q rendered", kind, name)
	return object{}
}

// dig walks a generically decoded document by map keys and slice indices.
func dig(t *testing.T, v any, path ...any) any {
	t.Helper()
	for i, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("path %v: element %d is not a map", path, i)
			}
			v = m[k]
		case int:
			s, ok := v.([]any)
			if !ok || k >= len(s) {
				t.Fatalf("path %v: element %d is not a list with index %d", path, i, k)
			}
			v = s[k]
		}
	}
	return v
}
