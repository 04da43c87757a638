package walk

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// crdSource is a CustomResourceDefinition file of a Go module on the module proxy: the projects'
// own CRDs, which carry the OpenAPI schemas and CEL rules the API server validates their objects
// with. version "" is the version deploy/go.mod requires (the Go types the chart tests decode
// into); prometheus-operator's root module, which holds its CRDs, is newer than v0.85.0 nowhere
// on the proxy (later versions answer 403), so its CRDs are v0.85.0's while the types are v0.95.2.
type crdSource struct {
	module, version string
	files           []string // relative to the module root; a directory takes every *.yaml in it
	helm            []string // the files are a chart's templates: render the chart with these --set values
}

var crdSources = []crdSource{
	{module: "sigs.k8s.io/gateway-api", files: []string{"config/crd/standard"}},
	{module: "sigs.k8s.io/gateway-api-inference-extension", files: []string{"config/crd/bases/inference.networking.k8s.io_inferencepools.yaml"}},
	{module: "istio.io/api", files: []string{"kubernetes/customresourcedefinitions.gen.yaml"}},
	{module: "github.com/envoyproxy/gateway", files: []string{"charts/gateway-crds-helm"},
		helm: []string{"crds.envoyGateway.enabled=true", "crds.gatewayAPI.enabled=false"}},
	{module: "github.com/prometheus-operator/prometheus-operator", version: "v0.85.0", files: []string{
		"example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml",
		"example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml"}},
}

// moduleDir downloads module at version (deploy/go.mod's when "") through the Go module proxy
// and returns its directory in the module cache and the version.
func moduleDir(t *testing.T, deployDir, module, version string) (string, string) {
	t.Helper()
	if version == "" {
		out, err := exec.Command("go", "-C", deployDir, "list", "-m", "-f", "{{.Version}}", module).Output()
		if err != nil {
			t.Fatalf("go list -m %s in deploy/: %v", module, err)
		}
		version = strings.TrimSpace(string(out))
	}
	cmd := exec.Command("go", "mod", "download", "-json", module+"@"+version)
	cmd.Dir = t.TempDir() // outside any module: nothing is written to deploy/go.mod or go.sum
	out, err := cmd.Output()
	var info struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &info); err != nil || jerr != nil || info.Error != "" || info.Dir == "" {
		t.Fatalf("go mod download %s@%s: %v %v %s", module, version, err, jerr, info.Error)
	}
	return info.Dir, version
}

// installCRDs applies every CRD of crdSources with kubectl (server-side, as the CRDs exceed
// the annotation client-side apply keeps) and waits until the API server serves them.
func installCRDs(t *testing.T, w *walker, deployDir string) {
	t.Helper()
	for _, src := range crdSources {
		dir, version := moduleDir(t, deployDir, src.module, src.version)
		for _, f := range src.files {
			path := filepath.Join(dir, f)
			if src.helm != nil {
				args := []string{"template", "crds", path}
				for _, s := range src.helm {
					args = append(args, "--set", s)
				}
				manifest := w.exec(t, w.helm, args, "")
				w.exec(t, w.kubectl, []string{"apply", "--server-side", "-f", "-"}, manifest)
			} else {
				w.exec(t, w.kubectl, []string{"apply", "--server-side", "-f", path}, "")
			}
			t.Logf("CRDs: %s@%s %s", src.module, version, f)
		}
	}
	w.exec(t, w.kubectl, []string{"wait", "--for=condition=Established", "crd", "--all", "--timeout=60s"}, "")
}
