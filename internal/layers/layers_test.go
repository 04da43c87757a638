// Package layers holds the test of the package graph: which package of the module may import
// which (directly), and which packages must build without cgo (transitively). The same graph is
// drawn in docs/architecture.md; change both together.
package layers

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/condisagg/condisagg"

// allowed lists, for every library package of the module, the module packages it may import
// directly (non-test files). Binaries (cmd/*), the e2e suite and test-only packages may import
// anything and are not listed; a library package missing from this table fails the test, so a
// new package must take its place in the graph.
var allowed = map[string][]string{
	"policy":                {"cost"},
	"cost":                  {},
	"kvindex":               {},
	"workload":              {},
	"tokenizer":             {"internal/reqjson"},
	"sidecar":               {},
	"proto/condisagg/v1":    {},
	"sim":                   {"kvindex", "cost"},
	"kvevents":              {"kvindex"},
	"pool":                  {"policy"},
	"route":                 {"tokenizer", "kvindex", "policy", "pool", "internal/reqjson"},
	"decisionlog":           {"route", "policy"},
	"cluster":               {"route", "sim", "workload", "kvindex", "policy", "pool"},
	"tune":                  {"cluster", "workload", "sim", "policy", "route", "internal/flaglist", "internal/svgplot"},
	"kvevents/zmq":          {"kvevents", "kvindex"},
	"sim/vllmsim":           {"sim", "tokenizer", "kvevents"},
	"extproc":               {"route", "policy", "decisionlog"},
	"admin":                 {"route", "policy", "kvindex", "decisionlog", "proto/condisagg/v1"},
	"envoy":                 {"internal/proc", "internal/repo"},
	"internal/repo":         {},
	"internal/reqjson":      {},
	"internal/flaglist":     {},
	"internal/svgplot":      {},
	"internal/adminclient":  {"proto/condisagg/v1"},
	"internal/serveconfig":  {"extproc", "kvevents", "policy", "pool", "pool/kube"},
	"internal/statuspage":   {"extproc", "admin", "route", "policy", "pool", "kvindex", "internal/serveconfig", "decisionlog"},
	"internal/eventstreams": {"admin", "kvevents/zmq", "policy", "pool"},
	"internal/kubeapi":      {"internal/proc", "internal/repo"},
	"pool/kube":             {"pool"},
	"internal/proc":         {},
	"internal/engineproc":   {"internal/proc"},
	"internal/importcheck":  {},
	"internal/leakcheck":    {},
	"scripts/benchtable":    {},
	"internal/golden":       {},
	"internal/layers":       {},
}

// noCgo are the cores that must build with CGO_ENABLED=0: nothing in their import closure may
// use cgo or ZeroMQ (ARCHITECTURE §3; the simulator must run where czmq is not installed).
var noCgo = []string{"cost", "policy", "kvindex", "pool", "pool/kube", "workload", "sim", "kvevents", "route", "decisionlog", "cluster", "tokenizer", "tune"}

type pkg struct {
	path    string
	imports []string
	cgo     bool
}

func list(t *testing.T, args ...string) []pkg {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	cmd := exec.Command("go", append([]string{"list", "-e", "-f", "{{.ImportPath}}|{{join .Imports \",\"}}|{{len .CgoFiles}}"}, args...)...)
	cmd.Dir = filepath.Join(filepath.Dir(file), "..", "..")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list %v: %v\n%s", args, err, out)
	}
	var pkgs []pkg
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "|")
		if len(f) != 3 {
			t.Fatalf("go list line %q", line)
		}
		p := pkg{path: f[0], cgo: f[2] != "0"}
		if f[1] != "" {
			p.imports = strings.Split(f[1], ",")
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

func local(path string) (string, bool) {
	if path == module {
		return "", true
	}
	return strings.CutPrefix(path, module+"/")
}

// TestDirectImports: every library package imports only what the graph allows it.
func TestDirectImports(t *testing.T) {
	for _, p := range list(t, "./...") {
		name, _ := local(p.path)
		if strings.HasPrefix(name, "cmd/") || name == "e2e" {
			continue
		}
		ok, listed := allowed[name]
		if !listed {
			t.Errorf("package %s is not in the layer graph (internal/layers and docs/architecture.md)", name)
			continue
		}
		for _, imp := range p.imports {
			dep, mod := local(imp)
			if mod && !slices.Contains(ok, dep) {
				t.Errorf("%s imports %s; the graph allows %v", name, dep, ok)
			}
		}
	}
}

// TestCoresWithoutCgo: the cores' transitive closures contain no cgo package of the module and
// no ZeroMQ binding, so they build with CGO_ENABLED=0 (CI builds them that way too).
func TestCoresWithoutCgo(t *testing.T) {
	for _, core := range noCgo {
		var bad []string
		for _, p := range list(t, "-deps", "./"+core) {
			_, mod := local(p.path)
			if (mod && p.cgo) || strings.Contains(p.path, "zeromq") || strings.Contains(p.path, "czmq") {
				bad = append(bad, p.path)
			}
		}
		sort.Strings(bad)
		if len(bad) > 0 {
			t.Errorf("%s depends on cgo or ZeroMQ through %v", core, bad)
		}
	}
}

// serverSide are the packages that belong to the binary's side of the graph: they may reach
// extproc (serve's configuration builds extproc.Settings; the golden test drives the server).
var serverSide = []string{"extproc", "internal/serveconfig", "internal/statuspage", "internal/eventstreams", "internal/golden", "internal/layers"}

// TestNobodyImportsServers: no other library package reaches extproc or a binary transitively.
func TestNobodyImportsServers(t *testing.T) {
	for name := range allowed {
		if slices.Contains(serverSide, name) {
			continue
		}
		for _, p := range list(t, "-deps", "./"+name) {
			dep, mod := local(p.path)
			if !mod || dep == name {
				continue
			}
			if dep == "extproc" || strings.HasPrefix(dep, "cmd/") || dep == "e2e" {
				t.Errorf("%s depends on %s", name, dep)
			}
		}
	}
}
