package walk

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/condisagg/condisagg/internal/kubeapi"
	"github.com/condisagg/condisagg/internal/repo"
)

// The namespace and router release of the walk-through.
const (
	namespace     = "llm"
	routerRelease = "condisagg"
)

// walker runs commands the way an operator's shell would: bash, in a scratch directory whose
// deploy/ is the repository's (the walk-through's paths are the repository root's), with the
// real helm and kubectl first on PATH and KUBECONFIG naming the API server's admin.
type walker struct {
	helm, kubectl string
	dir           string   // the shell's working directory
	env           []string // the shell's environment
}

// findTools returns helm and kubectl; without kubectl the test skips, as without the API server
// (kubeapi.RequireEnv=1 makes it fail).
func findTools(t *testing.T) (helm, kubectl string) {
	t.Helper()
	helm, err := repo.Tool("helm", "HELM_BIN")
	if err != nil {
		t.Fatalf("%v (make deps builds helm)", err)
	}
	kubectl, err = repo.Tool("kubectl", "KUBECTL_BIN")
	if err != nil {
		if os.Getenv(kubeapi.RequireEnv) == "1" {
			t.Fatalf("%v (make kube-tools builds kubectl)", err)
		}
		t.Skipf("no kubectl: %v (make kube-tools builds it)", err)
	}
	return helm, kubectl
}

func newWalker(t *testing.T, root, helm, kubectl, kubeconfig string) *walker {
	t.Helper()
	w := &walker{helm: helm, kubectl: kubectl, dir: t.TempDir()}
	if err := os.Symlink(filepath.Join(root, "deploy"), filepath.Join(w.dir, "deploy")); err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir() // helm and kubectl by those names, whatever their paths
	for name, p := range map[string]string{"helm": helm, "kubectl": kubectl} {
		if err := os.Symlink(p, filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	home := t.TempDir()
	w.env = []string{"PATH=" + bin + ":/usr/local/bin:/usr/bin:/bin", "HOME=" + home, "KUBECONFIG=" + kubeconfig,
		"HELM_CACHE_HOME=" + filepath.Join(home, "cache"), "HELM_CONFIG_HOME=" + filepath.Join(home, "config"),
		"HELM_DATA_HOME=" + filepath.Join(home, "data"), "LANG=C",
		"HF_TOKEN=hf_walk_not_a_real_token"} // the doc's `$HF_TOKEN`, for the hf-token Secret
	return w
}

// exec runs a binary with args (stdin from input) in the walker's directory and environment,
// and fails the test when it fails.
func (w *walker) exec(t *testing.T, path string, args []string, input string) string {
	t.Helper()
	cmd := exec.Command(path, args...)
	cmd.Dir, cmd.Env, cmd.Stdin = w.dir, w.env, strings.NewReader(input)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", filepath.Base(path), strings.Join(args, " "), err, out, stderr.Bytes())
	}
	return string(out)
}

// shell runs one command of the walk-through with bash (pipefail) and returns its output.
func (w *walker) shell(line string) (string, error) {
	cmd := exec.Command("bash", "-o", "pipefail", "-c", line)
	cmd.Dir, cmd.Env = w.dir, w.env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// expect holds what some commands must print, beyond succeeding: the part of the command
// that selects them, and a pattern of the output.
var expect = []struct{ command, output string }{
	// The router's pod (started by the stand-in from the chart's Deployment) under the doc's label.
	{"get pods -l app.kubernetes.io/instance=condisagg", `(?m)^condisagg-0\s+\S+\s+Running`},
	// §8: kubectl stamps the pod template (the Deployment controller would then roll the pod).
	{"rollout restart deployment/condisagg", `deployment.apps/condisagg restarted`},
	// helm install's report of the release.
	{"helm install ", `STATUS: deployed`},
}

// TestDeployWalk runs docs/deploy.md from an empty namespace against a real kube-apiserver and
// etcd: every helm install and kubectl command, as written and in order, with the real helm and
// kubectl; the API server validates each object with its schema (built-in types) or the
// projects' CRDs (Gateway API, Inference Extension, Istio, Envoy Gateway, prometheus-operator).
// A `<gateway>` command runs once per gateway values file, followed by the commands of that
// gateway's section; a second helm install of a release uninstalls the first (the doc's
// variants are alternatives). Between commands, standIn plays the controllers and the kubelet
// that do not run here. Commands that need what does not run here carry "not run here:" and
// are logged; a command that reaches a pod without that mark fails the test. Finally the
// router's discovery, as the chart's ServiceAccount, must find one worker per fleet pod.
func TestDeployWalk(t *testing.T) {
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	helm, kubectl := findTools(t)
	cluster := kubeapi.Start(t)
	w := newWalker(t, root, helm, kubectl, cluster.Admin)
	start := time.Now()
	ctx := context.Background()
	cs := clientFor(t, cluster.Admin)

	// Prerequisites the walk-through names and does not create: the gateways' and
	// prometheus-operator's CRDs (§2, §5b-§5d) and Istio's namespace (§5b).
	installCRDs(t, w, filepath.Join(root, "deploy"))
	w.exec(t, w.kubectl, []string{"create", "namespace", "istio-system"}, "")
	checkStrict(t, w)
	st := newStandIn(ctx, t, cs, namespace)

	text, err := os.ReadFile(filepath.Join(root, "docs", "deploy.md"))
	if err != nil {
		t.Fatal(err)
	}
	cmds := parseDoc(string(text))
	gateways := gatewayValues(t, root)
	bySection := map[string][]command{} // gateway values name -> the commands of its section
	for _, c := range cmds {
		if m := gatewayFile.FindStringSubmatch(c.section); m != nil {
			bySection[m[1]] = append(bySection[m[1]], c)
		}
	}
	installed := map[string]bool{} // release/namespace
	ran, skipped := 0, map[string]bool{}
	run := func(c command, text string) {
		t.Helper()
		if c.skip != "" {
			if !skipped[c.text] {
				t.Logf("docs/deploy.md:%d not run (%s): %s", c.line, c.skip, c.text)
			}
			skipped[c.text] = true
			return
		}
		if c.reachesPods() {
			t.Errorf("docs/deploy.md:%d reaches a running pod, which does not exist here; mark it %q: %s", c.line, notRun+" <why>", c.text)
			return
		}
		if !c.cluster() {
			return // helm template (TestDeployDocCommands), the images (deploy/image)
		}
		if rel, ns, ok := helmInstall(text); ok {
			if installed[rel+"/"+ns] {
				w.exec(t, w.helm, []string{"uninstall", rel, "-n", ns}, "")
				st.sync(ctx, t)
			}
			installed[rel+"/"+ns] = true
		}
		out, err := w.shell(text)
		ran++
		if err != nil {
			t.Fatalf("docs/deploy.md:%d (%s): %s\n%v\n%s", c.line, c.section, text, err, out)
		}
		t.Logf("docs/deploy.md:%d ran: %s\n%s", c.line, text, indent(out))
		for _, e := range expect {
			if strings.Contains(text, e.command) && !regexp.MustCompile(e.output).MatchString(out) {
				t.Errorf("docs/deploy.md:%d: %s printed\n%s\nwant %q", c.line, text, out, e.output)
			}
		}
		if rel, ns, ok := helmInstall(text); ok {
			checkRelease(t, w, cluster.Kubeconfig(t, "admin", ns), rel, ns)
		}
		st.sync(ctx, t)
	}
	for _, c := range cmds {
		if _, ok := bySection[gatewayOf(c.section)]; ok {
			continue // run after each install with that gateway
		}
		if !strings.Contains(c.text, "<gateway>") {
			run(c, c.text)
			continue
		}
		for _, g := range gateways {
			run(c, strings.ReplaceAll(c.text, "<gateway>", g))
			for _, sc := range bySection[g] {
				run(sc, sc.text)
			}
		}
	}
	t.Logf("%d commands run, %d not run here, in %s", ran, len(skipped), time.Since(start).Round(time.Millisecond))
	if ran < 10 {
		t.Fatalf("ran %d commands of docs/deploy.md; the walk-through has more", ran)
	}
	if !installed["vllm/"+namespace] || !installed[routerRelease+"/"+namespace] {
		t.Fatalf("the walk installed %v; want the fleet (vllm) and the router (%s) in %s", installed, routerRelease, namespace)
	}
	if tok, err := os.ReadFile(filepath.Join(w.dir, "admin.token")); err != nil || !regexp.MustCompile(`^[0-9a-f]{64}$`).Match(tok) {
		t.Errorf("admin.token (§6) = %q, %v; want the 64 hex digits §5's Secret holds", tok, err)
	}
	checkDiscovery(ctx, t, cluster, cs, st)
}

// gatewayOf is the gateway values name a section is about, "" for none.
func gatewayOf(section string) string {
	if m := gatewayFile.FindStringSubmatch(section); m != nil {
		return m[1]
	}
	return ""
}

// gatewayValues lists the gateway values files of deploy/helm/examples in the order of
// docs/deploy.md's sections (5a-5d) — every file but those a gateway file is added to.
func gatewayValues(t *testing.T, root string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "deploy", "helm", "examples", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	order := []string{"plain-envoy", "istio", "envoy-gateway", "inference-pool"}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		if !slices.Contains(order, name) && !slices.Contains([]string{"common", "discovery", "engine-policy"}, name) {
			t.Fatalf("deploy/helm/examples/%s.yaml: a gateway file the walk does not know; add it to gatewayValues", name)
		}
	}
	return order
}

// helmInstall returns the release and namespace of a `helm install` command.
func helmInstall(text string) (release, ns string, ok bool) {
	f := strings.Fields(text)
	if len(f) < 3 || f[0] != "helm" || f[1] != "install" {
		return "", "", false
	}
	for i := 3; i+1 < len(f); i++ {
		if f[i] == "-n" || f[i] == "--namespace" {
			ns = f[i+1]
		}
	}
	return f[2], ns, true
}

// checkRelease: every object of the release's manifest is in the API server (kubectl get
// reads each one back; kubeconfig's context names ns, where helm puts objects that name no
// namespace).
func checkRelease(t *testing.T, w *walker, kubeconfig, release, ns string) {
	t.Helper()
	manifest := w.exec(t, w.helm, []string{"get", "manifest", release, "-n", ns}, "")
	want := 0
	for _, doc := range strings.Split(manifest, "\n---") {
		if strings.Contains(doc, "\nkind: ") || strings.HasPrefix(strings.TrimSpace(doc), "kind: ") {
			want++
		}
	}
	names := strings.Fields(w.exec(t, w.kubectl, []string{"--kubeconfig", kubeconfig, "get", "-f", "-", "-o", "name"}, manifest))
	if len(names) != want || want == 0 {
		t.Errorf("release %s: the API server holds %d of its %d objects: %v", release, len(names), want, names)
	}
	kinds := map[string]int{}
	for _, n := range names {
		kinds[strings.SplitN(n, "/", 2)[0]]++
	}
	t.Logf("release %s: %d objects accepted: %v", release, len(names), kinds)
}

func clientFor(t *testing.T, kubeconfig string) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return "    (no output)"
	}
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}

// checkStrict: helm install, as the walk runs it, fails on an object with a misspelt field, of a
// built-in kind and of a CRD's kind, with the API server's message naming the field. That is what
// makes each install of the walk a validation of the chart's objects.
func checkStrict(t *testing.T, w *walker) {
	t.Helper()
	for name, obj := range map[string]string{
		"builtin": "apiVersion: v1\nkind: Service\nmetadata: {name: probe}\nspec:\n  ports: [{name: http, port: 80, targetPrt: 8080}]\n",
		"crd": "apiVersion: inference.networking.k8s.io/v1\nkind: InferencePool\nmetadata: {name: probe}\nspec:\n" +
			"  selector: {matchLabels: {app: probe}}\n  targetPorts: [{number: 8000}]\n" +
			"  endpointPickerRef: {name: probe, port: {number: 9002}, failurMode: FailClose}\n",
	} {
		chart := t.TempDir()
		if err := os.MkdirAll(filepath.Join(chart, "templates"), 0o755); err != nil {
			t.Fatal(err)
		}
		for f, text := range map[string]string{"Chart.yaml": "apiVersion: v2\nname: probe\nversion: 0.1.0\n", "templates/obj.yaml": obj} {
			if err := os.WriteFile(filepath.Join(chart, f), []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		field := map[string]string{"builtin": "targetPrt", "crd": "failurMode"}[name]
		out, err := w.shell("helm install probe-" + name + " " + chart + " -n default")
		if err == nil || !strings.Contains(out, field) {
			t.Errorf("helm install of a %s object with the misspelt field %s: %v\n%s\nwant a refusal naming the field", name, field, err, out)
		}
		t.Logf("strict validation (%s kind): %s", name, strings.TrimSpace(out))
	}
}
