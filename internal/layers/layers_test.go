// Package layers holds the test of the package graph: which package of the module may import
// which (directly), and which packages must build without cgo (transitively). The same graph is
// drawn in docs/architecture.md; change both together.
package layers

import (
	"iter"
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
	"policy":               {"cost"},
	"cost":                 {},
	"calibrate":            {"cost"},
	"calibrate/engine":     {"calibrate", "cost", "internal/svgplot"},
	"kvindex":              {"internal/openaddr"},
	"workload":             {"internal/splitmix"},
	"tokenizer":            {"internal/reqjson"},
	"sidecar":              {},
	"proto/condisagg/v1":   {},
	"sim":                  {"kvindex", "cost", "internal/splitmix"},
	"kvevents":             {"kvindex"},
	"pool":                 {"policy", "internal/openaddr"},
	"feedback":             {"policy"},
	"route":                {"tokenizer", "kvindex", "policy", "pool", "feedback", "fleet", "internal/reqjson"},
	"fleet":                {"policy"},
	"decisionlog":          {"route", "policy"},
	"cluster":              {"route", "feedback", "sim", "workload", "kvindex", "policy", "pool"},
	"tune":                 {"cluster", "cost", "workload", "sim", "policy", "route", "feedback", "internal/flaglist", "internal/svgplot", "internal/version"},
	"kvevents/zmq":         {"kvevents", "kvindex"},
	"sim/vllmsim":          {"sim", "tokenizer", "kvevents", "internal/splitmix"},
	"extproc":              {"route", "policy", "decisionlog"},
	"admin":                {"route", "policy", "pool", "kvindex", "decisionlog", "proto/condisagg/v1"},
	"envoy":                {"internal/proc", "internal/repo"},
	"internal/repo":        {},
	"internal/reqjson":     {},
	"internal/flaglist":    {},
	"internal/splitmix":    {},
	"internal/openaddr":    {},
	"internal/svgplot":     {},
	"internal/adminclient": {"proto/condisagg/v1"},
	"server": {"extproc", "admin", "decisionlog", "route", "feedback", "policy", "pool", "pool/kube", "pool/probe", "kvindex", "kvevents", "kvevents/zmq", "tokenizer",
		"server/config", "server/statuspage", "server/eventstreams", "bookbus", "internal/adminclient", "proto/condisagg/v1"},
	"server/config":        {"bookbus", "cost", "extproc", "kvevents", "policy", "pool", "pool/kube", "tokenizer"},
	"bookbus":              {"pool"},
	"internal/natstest":    {},
	"server/statuspage":    {"extproc", "admin", "route", "policy", "pool", "kvindex", "server/config", "decisionlog"},
	"server/eventstreams":  {"admin", "kvevents/zmq", "policy", "pool"},
	"internal/kubeapi":     {"internal/proc", "internal/repo", "internal/testport"},
	"internal/testport":    {},
	"pool/kube":            {"pool"},
	"pool/probe":           {"pool"},
	"internal/proc":        {},
	"internal/engineproc":  {"internal/proc"},
	"internal/importcheck": {},
	"internal/leakcheck":   {},
	"internal/version":     {},
	"scripts/benchtable":   {},
	"internal/golden":      {},
	"internal/layers":      {},
}

// noCgo are the cores that must build with CGO_ENABLED=0: nothing in their import closure may
// use cgo or ZeroMQ (ARCHITECTURE §3; the simulator must run where czmq is not installed).
var noCgo = []string{"bookbus", "cost", "calibrate", "calibrate/engine", "policy", "feedback", "fleet", "kvindex", "pool", "pool/kube", "workload", "sim", "kvevents", "route", "decisionlog", "cluster", "tokenizer", "tune"}

// pureCores are the functional cores of STYLE §2.1 with the standard packages of I/O that
// none of their non-test files may import: no sockets, HTTP, files or processes. Their shells
// (pool/probe, kvevents/zmq, sim/vllmsim) do that work and feed them. pool may import net/url
// and net/netip (pure parsers) but not net itself, nor net/http.
var pureCores = []string{"cost", "calibrate", "policy", "kvindex", "workload", "sim", "kvevents", "pool"}

var ioPackages = []string{"net", "net/http", "os", "os/exec", "syscall"}

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
var serverSide = []string{"extproc", "server", "server/config", "server/statuspage", "server/eventstreams", "internal/golden", "internal/layers"}

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

// aboveInternal are the packages internal/ sits below: its helpers are leaves that no
// server, routing, pool or event package reaches from inside.
var aboveInternal = []string{"extproc", "route", "pool", "kvevents", "server"}

// TestInternalIsLeaf: no package under internal/ reaches extproc, route, pool, kvevents or
// server (or a package under them) through its closure.
func TestInternalIsLeaf(t *testing.T) {
	for name := range allowed {
		if !strings.HasPrefix(name, "internal/") {
			continue
		}
		for _, p := range list(t, "-deps", "./"+name) {
			dep, mod := local(p.path)
			if !mod {
				continue
			}
			for _, above := range aboveInternal {
				if dep == above || strings.HasPrefix(dep, above+"/") {
					t.Errorf("%s depends on %s; internal/ holds leaf helpers only", name, dep)
				}
			}
		}
	}
}

// TestPureCoresDoNoIO: no pure core imports a package of I/O directly (ioPackages); pool's
// probes, scrapes and DNS lookups live in pool/probe.
func TestPureCoresDoNoIO(t *testing.T) {
	for name, imp := range directImports(t, pureCores) {
		if slices.Contains(ioPackages, imp) {
			t.Errorf("pure core %s imports %s: I/O belongs in its shell", name, imp)
		}
	}
}

// directImports yields (package, import) for every direct non-test import of the named module
// packages.
func directImports(t *testing.T, names []string) iter.Seq2[string, string] {
	t.Helper()
	args := make([]string, len(names))
	for i, n := range names {
		args[i] = "./" + n
	}
	pkgs := list(t, args...)
	if len(pkgs) != len(names) {
		t.Fatalf("go list %v returned %d packages", args, len(pkgs))
	}
	return func(yield func(string, string) bool) {
		for _, p := range pkgs {
			name, _ := local(p.path)
			for _, imp := range p.imports {
				if !yield(name, imp) {
					return
				}
			}
		}
	}
}

// metricFree packages decide or record and export nothing: the shells that run them (serve,
// extproc, pool's Metrics, feedback's collector) own every Prometheus metric.
var metricFree = []string{"route", "policy", "kvindex", "cost", "workload", "sim", "decisionlog"}

// TestDecidersExportNoMetrics: no metricFree package imports a Prometheus package directly.
func TestDecidersExportNoMetrics(t *testing.T) {
	for name, imp := range directImports(t, metricFree) {
		if strings.HasPrefix(imp, "github.com/prometheus/") {
			t.Errorf("%s imports %s: metrics belong to the shell that runs it", name, imp)
		}
	}
}
