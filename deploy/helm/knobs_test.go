package helm

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"net"
	"os/exec"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	istiosecurityv1 "istio.io/client-go/pkg/apis/security/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/condisagg/condisagg/deploy/internal/tools"
)

func variantNamed(t *testing.T, name string) variant {
	t.Helper()
	for _, v := range variants() {
		if v.name == name {
			return v
		}
	}
	t.Fatalf("no variant %s", name)
	return variant{}
}

// TestChartPodKnobs: env, extra volumes and their mounts, init containers, priority class and
// topology spread reach the router pod as given (testdata/knobs.yaml), next to the chart's own
// volumes; a spread constraint without labelSelector selects the Deployment's own pods.
func TestChartPodKnobs(t *testing.T) {
	objs := render(t, variantNamed(t, "pod_knobs"))
	dep := decodeAs[*appsv1.Deployment](t, find(t, objs, "Deployment", release))
	pod, c := routerPod(t, objs)

	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	if env["GOMEMLIMIT"].Value != "3686MiB" {
		t.Errorf("GOMEMLIMIT = %+v; want 3686MiB", env["GOMEMLIMIT"])
	}
	if f := env["NODE_NAME"].ValueFrom; f == nil || f.FieldRef == nil || f.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("NODE_NAME = %+v; want valueFrom spec.nodeName", env["NODE_NAME"])
	}

	if v := volumeAt(t, pod, c, "/etc/ssl/corp/ca.pem"); v.ConfigMap == nil || v.ConfigMap.Name != "corp-ca" {
		t.Errorf("/etc/ssl/corp is not ConfigMap corp-ca: %+v", v.VolumeSource)
	}
	if v := volumeAt(t, pod, c, "/scratch/x"); v.EmptyDir == nil || v.EmptyDir.SizeLimit.String() != "64Mi" {
		t.Errorf("/scratch is not a 64Mi emptyDir: %+v", v.VolumeSource)
	}
	// The chart's own volumes are still there, at their paths.
	if v := volumeAt(t, pod, c, "/etc/condisagg/condisagg.yaml"); v.Name != "config" || v.ConfigMap == nil {
		t.Errorf("config volume = %+v", v)
	}
	if v := volumeAt(t, pod, c, "/etc/condisagg-admin/token"); v.Name != "admin-token" || v.Secret == nil {
		t.Errorf("token volume = %+v", v)
	}

	if len(pod.InitContainers) != 1 {
		t.Fatalf("init containers = %d; want 1", len(pod.InitContainers))
	}
	ic := &pod.InitContainers[0]
	if ic.Name != "wait-for-tokenizer" || ic.Image != "registry.example.com/busybox:1.37" {
		t.Errorf("init container = %s %s", ic.Name, ic.Image)
	}
	if v := volumeAt(t, pod, ic, "/models/qwen3/tokenizer.json"); v.Name != "model" || v.PersistentVolumeClaim == nil {
		t.Errorf("init container's /models is not the model volume: %+v", v)
	}

	if pod.PriorityClassName != "llm-critical" {
		t.Errorf("priorityClassName = %q; want llm-critical", pod.PriorityClassName)
	}
	checkSpread(t, pod.TopologySpreadConstraints, dep, "topology.kubernetes.io/zone", map[string]string{"tier": "routing"})

	// podAnnotations keep their place beside the chart's checksum.
	ann := dep.Spec.Template.Annotations
	if ann["team"] != "inference" || ann["checksum/config"] == "" {
		t.Errorf("pod annotations = %v; want team and checksum/config", ann)
	}
}

// checkSpread: the first constraint (topologyKey defaulted) selects exactly the pods of dep, the
// second keeps the labelSelector it was given.
func checkSpread(t *testing.T, got []corev1.TopologySpreadConstraint, dep *appsv1.Deployment, firstKey string, secondLabels map[string]string) {
	t.Helper()
	if len(got) == 0 {
		t.Fatal("no topologySpreadConstraints rendered")
	}
	first := got[0]
	if first.TopologyKey != firstKey || first.MaxSkew != 1 || first.LabelSelector == nil {
		t.Fatalf("first constraint = %+v; want %s, maxSkew 1, a labelSelector", first, firstKey)
	}
	if !reflect.DeepEqual(first.LabelSelector.MatchLabels, dep.Spec.Selector.MatchLabels) {
		t.Errorf("defaulted labelSelector %v; want the Deployment's selector %v", first.LabelSelector.MatchLabels, dep.Spec.Selector.MatchLabels)
	}
	if secondLabels != nil {
		if len(got) != 2 || got[1].LabelSelector == nil || !reflect.DeepEqual(got[1].LabelSelector.MatchLabels, secondLabels) {
			t.Errorf("second constraint = %+v; want its own labelSelector %v", got[1:], secondLabels)
		}
	}
}

// TestChartEnvoyPodKnobs: the chart's Envoy gets its priority class, placement, topology spread
// and a PodDisruptionBudget that selects its pods and not the router's (and the router's PDB not
// the Envoy's).
func TestChartEnvoyPodKnobs(t *testing.T) {
	objs := render(t, variantNamed(t, "pod_knobs"))
	envoy := decodeAs[*appsv1.Deployment](t, find(t, objs, "Deployment", release+"-envoy"))
	router := decodeAs[*appsv1.Deployment](t, find(t, objs, "Deployment", release))
	pod := &envoy.Spec.Template.Spec
	if pod.PriorityClassName != "llm-gateway" || pod.NodeSelector["pool"] != "edge" || len(pod.Tolerations) != 1 || pod.Tolerations[0].Key != "edge" {
		t.Errorf("Envoy pod: priorityClassName %q, nodeSelector %v, tolerations %+v", pod.PriorityClassName, pod.NodeSelector, pod.Tolerations)
	}
	checkSpread(t, pod.TopologySpreadConstraints, envoy, "kubernetes.io/hostname", nil)

	podsOf := func(d *appsv1.Deployment) labels.Set { return labels.Set(d.Spec.Template.Labels) }
	for _, c := range []struct {
		pdb        string
		own, other *appsv1.Deployment
		max, min   string // the budget set ("" = unset)
	}{
		{release + "-envoy", envoy, router, "50%", ""},
		{release, router, envoy, "", "1"},
	} {
		pdb := decodeAs[*policyv1.PodDisruptionBudget](t, find(t, objs, "PodDisruptionBudget", c.pdb))
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil {
			t.Fatal(err)
		}
		if !sel.Matches(podsOf(c.own)) || sel.Matches(podsOf(c.other)) {
			t.Errorf("PDB %s selects %s: own pods %v, other pods %v", c.pdb, sel, sel.Matches(podsOf(c.own)), sel.Matches(podsOf(c.other)))
		}
		str := func(v *intstr.IntOrString) string {
			if v == nil {
				return ""
			}
			return v.String()
		}
		if str(pdb.Spec.MaxUnavailable) != c.max || str(pdb.Spec.MinAvailable) != c.min {
			t.Errorf("PDB %s maxUnavailable %q minAvailable %q; want %q %q", c.pdb, str(pdb.Spec.MaxUnavailable), str(pdb.Spec.MinAvailable), c.max, c.min)
		}
	}
	// Disabled, there is none; the default budget keeps one pod (minAvailable 1).
	off := render(t, variant{values: []string{"common.yaml", "plain-envoy.yaml"}, set: []string{"gateway.envoy.podDisruptionBudget.enabled=false"}})
	for _, o := range off {
		if o.Kind == "PodDisruptionBudget" && o.Name == release+"-envoy" {
			t.Error("Envoy PDB rendered although disabled")
		}
	}
	def := decodeAs[*policyv1.PodDisruptionBudget](t, find(t, render(t, variantNamed(t, "plain_envoy")), "PodDisruptionBudget", release+"-envoy"))
	if def.Spec.MinAvailable == nil || def.Spec.MinAvailable.IntValue() != 1 || def.Spec.MaxUnavailable != nil {
		t.Errorf("default Envoy PDB minAvailable = %v, maxUnavailable %v; want 1 and none", def.Spec.MinAvailable, def.Spec.MaxUnavailable)
	}
}

// TestChartConfigChecksum: the pod template carries the SHA-256 of the serve config the ConfigMap
// holds, so a changed config changes the template (and rolls the pod) and an unchanged one does
// not; rollOnConfigChange=false leaves it out.
func TestChartConfigChecksum(t *testing.T) {
	checksum := func(set ...string) (string, string) {
		objs := render(t, variant{values: []string{"common.yaml"}, set: set})
		_, c := routerPod(t, objs)
		text, _ := serveConfigText(t, objs, c)
		sum := sha256.Sum256([]byte(text))
		dep := decodeAs[*appsv1.Deployment](t, find(t, objs, "Deployment", release))
		return dep.Spec.Template.Annotations["checksum/config"], hex.EncodeToString(sum[:])
	}
	base, baseText := checksum()
	if base != baseText {
		t.Errorf("checksum/config = %q; the ConfigMap's condisagg.yaml hashes to %s", base, baseText)
	}
	again, _ := checksum()
	if again != base {
		t.Errorf("checksum changed between two renders of the same values: %s, %s", base, again)
	}
	changed, changedText := checksum("config.log_level=debug")
	if changed == base || changed != changedText {
		t.Errorf("config.log_level=debug: checksum %s (was %s); the new config hashes to %s", changed, base, changedText)
	}
	// A value outside the serve config leaves the pod template alone.
	if other, _ := checksum("service.annotations.a=b"); other != base {
		t.Errorf("service annotation changed the config checksum: %s, %s", base, other)
	}
	if off, _ := checksum("rollOnConfigChange=false"); off != "" {
		t.Errorf("rollOnConfigChange=false: checksum/config = %q; want none", off)
	}
}

// TestChartAdminToken: the token comes from existingSecret or value; with value the chart writes
// the Secret, the same on every render; with neither, with both, or with a token condisagg would
// refuse, the render fails with the chart's message (never echoing the token).
func TestChartAdminToken(t *testing.T) {
	v := variantNamed(t, "token_value")
	objs := render(t, v)
	pod, c := routerPod(t, objs)
	vol := volumeAt(t, pod, c, "/etc/condisagg-admin/token")
	secret := decodeAs[*corev1.Secret](t, find(t, objs, "Secret", release+"-admin-token"))
	if vol.Secret == nil || vol.Secret.SecretName != secret.Name {
		t.Errorf("token volume %+v; want Secret %s", vol.VolumeSource, secret.Name)
	}
	if got := string(secret.Data["token"]); got != testToken {
		t.Errorf("Secret data token = %q; want admin.token.value", got)
	}

	// --set-file of a file ending in a newline (as `openssl rand -hex 32 > f` writes it): the
	// Secret holds the token without it, as condisagg would read it.
	file := writeFile(t, t.TempDir(), "admin.token", testToken+"\n")
	out, err := helmRun(t, append(variant{values: []string{"common.yaml"}, set: []string{"admin.token.existingSecret="}}.args(),
		"--set-file", "admin.token.value="+file)...)
	if err != nil {
		t.Fatal(err)
	}
	fromFile := decodeAs[*corev1.Secret](t, find(t, splitObjects(t, out), "Secret", release+"-admin-token"))
	if got := string(fromFile.Data["token"]); got != testToken {
		t.Errorf("--set-file token: Secret holds %q; want %q", got, testToken)
	}

	cases := map[string]struct {
		set        []string
		want       string
		mustNotSay string
	}{
		"neither": {[]string{"admin.token.existingSecret="}, "admin.token: give the admin token: admin.token.existingSecret=condisagg-admin-token after creating that Secret", ""},
		"both":    {[]string{"admin.token.value=" + testToken}, "admin.token: set existingSecret or value, not both", testToken},
		"short":   {[]string{"admin.token.existingSecret=", "admin.token.value=tooShort123"}, "admin.token.value: must be one token of at least 16 characters", "tooShort123"},
		"spaces":  {[]string{"admin.token.existingSecret=", "admin.token.value=0123456789 abcdef0123"}, "admin.token.value: must be one token", "0123456789 abcdef0123"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := helmRun(t, variant{values: []string{"common.yaml"}, set: c.set}.args()...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v; want one containing %q", err, c.want)
			}
			// The command line is part of the error; the message itself must not repeat the token.
			msg := err.Error()[strings.Index(err.Error(), c.want):]
			if c.mustNotSay != "" && strings.Contains(msg, c.mustNotSay) {
				t.Errorf("message repeats the token: %s", msg)
			}
		})
	}
}

// TestChartRendersAreStable: two renders of every variant are byte for byte the same. Nothing
// is random or read from a cluster at render time, so `helm template` (GitOps) and `helm upgrade`
// agree, the admin token included.
func TestChartRendersAreStable(t *testing.T) {
	for _, v := range variants() {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			a, err := helmRun(t, v.args()...)
			if err != nil {
				t.Fatal(err)
			}
			b, err := helmRun(t, v.args()...)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(a, b) {
				t.Errorf("two renders differ:\n%s", firstDiff(string(a), string(b)))
			}
		})
	}
}

// TestChartLintsDefaults: plain `helm lint` on the chart's own defaults passes (the lint run
// ignores the chart's required-value failures but prints them: the output names what to set),
// and rendering the defaults fails with the chart's message instead of a YAML error.
func TestChartLintsDefaults(t *testing.T) {
	for _, args := range [][]string{{"lint", chartDir}, {"lint", "--strict", chartDir}} {
		bin := helmRunCombined(t, args...)
		if bin.err != nil {
			t.Errorf("helm %s: %v\n%s", strings.Join(args, " "), bin.err, bin.out)
			continue
		}
		for _, want := range []string{"model.volume: give the volume", "admin.token: give the admin token", "config.workers: list at least one"} {
			if !strings.Contains(bin.out, want) {
				t.Errorf("helm %s output does not name %q:\n%s", strings.Join(args, " "), want, bin.out)
			}
		}
	}
	_, err := helmRun(t, "template", release, chartDir, "--namespace", namespace)
	if err == nil || !strings.Contains(err.Error(), "execution error") || strings.Contains(err.Error(), "unable to parse YAML") {
		t.Errorf("helm template with the defaults: err = %v; want the chart's own failure", err)
	}
}

// TestChartIstioPeerAuthentication: the Istio variant's PeerAuthentication sets every pod port
// condisagg names as a worker endpoint PERMISSIVE (the ORIGINAL_DST clusters dial exactly those),
// on pods in the workers' namespace, and only at port level.
func TestChartIstioPeerAuthentication(t *testing.T) {
	objs := render(t, variantNamed(t, "istio"))
	pa := decodeAs[*istiosecurityv1.PeerAuthentication](t, find(t, objs, "PeerAuthentication", release+"-workers"))
	if pa.Namespace != namespace {
		t.Errorf("PeerAuthentication in %q; want the workers' namespace %s", pa.Namespace, namespace)
	}
	if pa.Spec.GetSelector().GetMatchLabels()["app"] != "vllm" || pa.Spec.GetMtls() != nil {
		t.Errorf("selector %v, mtls %v; want app=vllm and no workload-wide mode", pa.Spec.GetSelector(), pa.Spec.GetMtls())
	}
	_, doc := loadServeConfig(t, objs)
	workers, _ := doc["workers"].([]any)
	var ports []uint32
	for _, w := range workers {
		_, p, err := net.SplitHostPort(w.(map[string]any)["endpoint"].(string))
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.Atoi(p)
		ports = append(ports, uint32(n))
	}
	if len(ports) == 0 {
		t.Fatal("the serve config names no worker")
	}
	for _, p := range ports {
		if m := pa.Spec.GetPortLevelMtls()[p]; m.GetMode().String() != "PERMISSIVE" {
			t.Errorf("worker port %d: mode %v; want PERMISSIVE", p, m.GetMode())
		}
	}
	for p := range pa.Spec.GetPortLevelMtls() {
		if !slices.Contains(ports, p) {
			t.Errorf("port %d is PERMISSIVE but no worker endpoint uses it", p)
		}
	}
	// Off unless asked for, and never without a selector (portLevelMtls needs one).
	for _, o := range render(t, variant{values: []string{"common.yaml", "istio.yaml"}, set: []string{"gateway.istio.peerAuthentication.enabled=false"}}) {
		if o.Kind == "PeerAuthentication" {
			t.Errorf("PeerAuthentication %s rendered although disabled", o.Name)
		}
	}
}

type combined struct {
	out string
	err error
}

// helmRunCombined runs helm and returns stdout and stderr together (lint prints the chart's
// failures on stderr).
func helmRunCombined(t *testing.T, args ...string) combined {
	t.Helper()
	bin, err := tools.Find("helm")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, args...).CombinedOutput()
	return combined{out: string(out), err: err}
}
