package helm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/condisagg/condisagg/pool"
	"github.com/condisagg/condisagg/pool/kube"
	"github.com/condisagg/condisagg/sim/vllmsim"
)

// The fleet chart is rendered as docs/deploy.md installs it: release "vllm" in the router's
// namespace.
const (
	fleetRelease = "vllm"
	fleetChart   = "condisagg-fleet"
	fleetModel   = "Qwen/Qwen3-8B"
)

// fleetVariant is one render of the fleet chart: values files (a bare name is one of the chart's
// examples/) plus --set overrides.
type fleetVariant struct {
	name   string
	values []string
	set    []string
}

func (v fleetVariant) args() []string {
	args := []string{"template", fleetRelease, fleetChart, "--namespace", namespace}
	for _, f := range v.values {
		if !strings.Contains(f, "/") {
			f = fleetChart + "/examples/" + f
		}
		args = append(args, "-f", f)
	}
	for _, s := range v.set {
		args = append(args, "--set", s)
	}
	return args
}

// fleetVariants: the defaults (real vLLM, which need only the model), the vllm-sim example, and
// data-parallel engines of both kinds with the optional knobs set.
func fleetVariants() []fleetVariant {
	return []fleetVariant{
		{name: "vllm", set: []string{"model.name=" + fleetModel}},
		{name: "vllm_sim", values: []string{"vllm-sim.yaml"}},
		{name: "vllm_data_parallel", set: []string{"model.name=" + fleetModel, "prefill.dataParallelSize=2", "decode.dataParallelSize=4",
			"decode.replicas=3", "decode.kvTransferConfig.kv_load_failure_policy=recompute", "engine.vllm.serverDevMode=true",
			"hfToken.existingSecret=hf-token", "cache.volume.persistentVolumeClaim.claimName=hf-cache", "shm.sizeLimit=",
			"prefill.extraArgs={--gpu-memory-utilization,0.9}", "prefill.env[0].name=UCX_TLS", "prefill.env[0].value=cuda_ipc\\,tcp"}},
		{name: "vllm_sim_data_parallel", values: []string{"vllm-sim.yaml"}, set: []string{"prefill.dataParallelSize=3", "decode.dataParallelSize=2",
			"sidecar.metricsPort=0", "services.sidecar=", "engine.vllmSim.numGpuBlocks=4096", "engine.vllmSim.perfModel=llama3.1-8b-h100"}},
	}
}

func renderFleet(t *testing.T, v fleetVariant) []object {
	t.Helper()
	out, err := helmRun(t, v.args()...)
	if err != nil {
		t.Fatal(err)
	}
	return splitObjects(t, out)
}

// fleetRoles are the two Deployments of a render, strictly decoded, by role.
func fleetRoles(t *testing.T, objs []object) map[string]*appsv1.Deployment {
	t.Helper()
	out := map[string]*appsv1.Deployment{}
	for _, role := range []string{"prefill", "decode"} {
		v, err := decodeStrict(find(t, objs, "Deployment", fleetRelease+"-"+role))
		if err != nil {
			t.Fatal(err)
		}
		out[role] = v.(*appsv1.Deployment)
	}
	return out
}

// fleetServices are the Services of a render, strictly decoded, by name.
func fleetServices(t *testing.T, objs []object) map[string]*corev1.Service {
	t.Helper()
	out := map[string]*corev1.Service{}
	for _, o := range objs {
		if o.Kind != "Service" {
			continue
		}
		v, err := decodeStrict(o)
		if err != nil {
			t.Fatal(err)
		}
		out[o.Name] = v.(*corev1.Service)
	}
	return out
}

func container(t *testing.T, d *appsv1.Deployment, name string) *corev1.Container {
	t.Helper()
	for i := range d.Spec.Template.Spec.Containers {
		if c := &d.Spec.Template.Spec.Containers[i]; c.Name == name {
			return c
		}
	}
	t.Fatalf("Deployment %s has no container %s", d.Name, name)
	return nil
}

// containerPort is the number of the pod's container port named name and the container that
// declares it (0, "" when none does), as the EndpointSlice controller resolves a Service's named
// targetPort.
func containerPort(pod *corev1.PodSpec, name string) (int32, string) {
	for _, c := range pod.Containers {
		for _, p := range c.Ports {
			if p.Name == name && (p.Protocol == "" || p.Protocol == corev1.ProtocolTCP) {
				return p.ContainerPort, c.Name
			}
		}
	}
	return 0, ""
}

// targetPort resolves a Service port's targetPort against a pod (named or numbered).
func targetPort(pod *corev1.PodSpec, sp corev1.ServicePort) (int32, string) {
	if sp.TargetPort.Type == intstr.String {
		return containerPort(pod, sp.TargetPort.StrVal)
	}
	n := sp.TargetPort.IntVal
	if n == 0 {
		n = sp.Port
	}
	for _, c := range pod.Containers {
		for _, p := range c.Ports {
			if p.ContainerPort == n {
				return n, c.Name
			}
		}
	}
	return n, ""
}

// flagValues reads an argument list of --flag value pairs and bare --flag switches (a switch is
// an argument followed by another flag or nothing) into a map; a repeated flag fails the test.
func flagValues(t *testing.T, args []string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "--") {
			continue // vLLM's positional model
		}
		if _, dup := m[a]; dup {
			t.Errorf("flag %s given twice in %q", a, args)
		}
		if i+1 < len(args) && !strings.HasPrefix(args[i+1], "--") {
			m[a] = args[i+1]
			i++
		} else {
			m[a] = ""
		}
	}
	return m
}

func atoi(t *testing.T, what, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%s: %q is not a number", what, s)
	}
	return n
}

// TestFleetObjectsDecodeStrictly renders every fleet variant and decodes every object strictly
// into its Kubernetes API type; the set of objects is the expected one and two renders are equal.
func TestFleetObjectsDecodeStrictly(t *testing.T) {
	for _, v := range fleetVariants() {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			out, err := helmRun(t, v.args()...)
			if err != nil {
				t.Fatal(err)
			}
			again, err := helmRun(t, v.args()...)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out, again) {
				t.Error("two renders differ")
			}
			var keys []string
			for _, o := range splitObjects(t, out) {
				if _, err := decodeStrict(o); err != nil {
					t.Errorf("%s %s: %v", o.APIVersion, o.key(), err)
				}
				if o.Namespace != namespace {
					t.Errorf("%s in namespace %q; want %q", o.key(), o.Namespace, namespace)
				}
				keys = append(keys, o.key())
			}
			want := []string{"Deployment/vllm-prefill", "Deployment/vllm-decode", "Service/vllm-prefill", "Service/vllm-decode",
				"Service/vllm-prefill-pods", "Service/vllm-decode-pods", "Service/pd-sidecar"}
			if v.name == "vllm_sim_data_parallel" { // services.sidecar=""
				want = slices.DeleteFunc(want, func(k string) bool { return k == "Service/pd-sidecar" })
			}
			slices.Sort(keys)
			slices.Sort(want)
			if !slices.Equal(keys, want) {
				t.Errorf("rendered %v; want %v", keys, want)
			}
		})
	}
}

// routerBlockSize is the block size condisagg's config has in the router chart's shared example.
func routerBlockSize(t *testing.T) int {
	t.Helper()
	cfg, _ := loadServeConfig(t, render(t, variant{name: "common", values: []string{"common.yaml"}}))
	if len(cfg.Models) != 1 || cfg.Models[0].Pool.BlockSize == 0 {
		t.Fatalf("router config models %+v: want one model with a block size", cfg.Models)
	}
	return cfg.Models[0].Pool.BlockSize
}

// TestFleetEngineArgs: every engine runs with every flag condisagg relies on, with values that agree
// with each other, with the pod spec and with the router chart's config: the block size (equal
// across engines and to condisagg's), KV events with replay on the ports the pod names kv-events
// and kv-replay (rank r on the port + r, as vllm-sim's own parser computes), the prompt-token
// details, NixlConnector with the role's kv_role and its side channel on the pod IP and the port
// named nixl, the data-parallel size. vLLM runs `vllm serve <model>`, vllm-sim listens on every
// interface with the model's tokenizer.
func TestFleetEngineArgs(t *testing.T) {
	blockSize := routerBlockSize(t)
	for _, v := range fleetVariants() {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			sim := strings.Contains(v.name, "sim")
			for role, d := range fleetRoles(t, renderFleet(t, v)) {
				pod := &d.Spec.Template.Spec
				c := container(t, d, "engine")
				f := flagValues(t, c.Args)
				t.Cleanup(func() {
					if t.Failed() {
						t.Logf("%s %s: %q", role, c.Image, c.Args)
					}
				})
				if got := atoi(t, "--block-size", f["--block-size"]); got != blockSize {
					t.Errorf("%s --block-size %d; the router chart's config.model.block_size is %d", role, got, blockSize)
				}
				if _, ok := f["--enable-prompt-tokens-details"]; !ok {
					t.Errorf("%s: no --enable-prompt-tokens-details (the transfer truth reads the decode answer's cached tokens)", role)
				}
				dp := atoi(t, "--data-parallel-size", f["--data-parallel-size"])
				if want := map[string]map[string]int{"vllm_data_parallel": {"prefill": 2, "decode": 4},
					"vllm_sim_data_parallel": {"prefill": 3, "decode": 2}}[v.name][role]; dp != max(want, 1) {
					t.Errorf("%s --data-parallel-size %d; want %d", role, dp, max(want, 1))
				}
				if n := atoi(t, "--max-num-batched-tokens", f["--max-num-batched-tokens"]); n != 8192 {
					t.Errorf("%s --max-num-batched-tokens %d; want the values' 8192", role, n)
				}
				httpName := map[string]string{"prefill": "engine-http", "decode": "http"}[role]
				if p, _ := containerPort(pod, httpName); p == 0 || strconv.Itoa(int(p)) != f["--port"] {
					t.Errorf("%s --port %s; the pod's port %s is %d", role, f["--port"], httpName, p)
				}
				for _, probe := range []*corev1.Probe{c.StartupProbe, c.ReadinessProbe, c.LivenessProbe} {
					if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != "/health" || probe.HTTPGet.Port.StrVal != httpName {
						t.Errorf("%s engine probe %+v; want GET /health on %s", role, probe, httpName)
					}
				}

				// KV events: the JSON through vllm-sim's parser of vLLM's KVEventsConfig; each
				// rank's endpoints through its rank offset, against the pod's named ports.
				kc, err := vllmsim.ParseKVEventsConfig(f["--kv-events-config"])
				if err != nil {
					t.Fatalf("%s: %v", role, err)
				}
				if !kc.EnableKVCacheEvents || kc.Publisher != "zmq" || kc.ReplayEndpoint == nil || kc.Topic == "" {
					t.Errorf("%s --kv-events-config %s: want events on, zmq, a replay endpoint and a topic", role, f["--kv-events-config"])
				}
				for r := range dp {
					rc, err := kc.ForRank(r)
					if err != nil {
						t.Fatalf("%s rank %d: %v", role, r, err)
					}
					sfx := ""
					if r > 0 {
						sfx = "-" + strconv.Itoa(r)
					}
					for name, ep := range map[string]string{"kv-events": rc.Endpoint, "kv-replay": *rc.ReplayEndpoint} {
						p, cname := containerPort(pod, name+sfx)
						if want := fmt.Sprintf("tcp://*:%d", p); ep != want || cname != "engine" {
							t.Errorf("%s rank %d binds %s; the engine's port %s is %d (container %q): want %s", role, r, ep, name+sfx, p, cname, want)
						}
					}
				}
				if p, _ := containerPort(pod, "kv-events-"+strconv.Itoa(dp)); p != 0 {
					t.Errorf("%s names kv-events-%d past its %d ranks", role, dp, dp)
				}

				// NixlConnector.
				var kt map[string]any
				if err := json.Unmarshal([]byte(f["--kv-transfer-config"]), &kt); err != nil {
					t.Fatalf("%s --kv-transfer-config: %v", role, err)
				}
				wantRole := map[string]string{"prefill": "kv_producer", "decode": "kv_consumer"}[role]
				if kt["kv_connector"] != "NixlConnector" || kt["kv_role"] != wantRole {
					t.Errorf("%s --kv-transfer-config %v; want NixlConnector, %s", role, kt, wantRole)
				}
				if v.name == "vllm_data_parallel" && role == "decode" && kt["kv_load_failure_policy"] != "recompute" {
					t.Errorf("decode --kv-transfer-config %v lost kvTransferConfig's kv_load_failure_policy", kt)
				}
				env := envOf(c)
				if e := env["POD_IP"]; e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "status.podIP" {
					t.Errorf("%s POD_IP %+v; want the downward API's status.podIP", role, e)
				}
				if e := env["VLLM_NIXL_SIDE_CHANNEL_HOST"]; e.Value != "$(POD_IP)" {
					t.Errorf("%s VLLM_NIXL_SIDE_CHANNEL_HOST %q; want $(POD_IP), the address the other engine dials", role, e.Value)
				}
				side := atoi(t, "VLLM_NIXL_SIDE_CHANNEL_PORT", env["VLLM_NIXL_SIDE_CHANNEL_PORT"].Value)
				for r := range dp {
					name := "nixl"
					if r > 0 {
						name += "-" + strconv.Itoa(r)
					}
					if p, cname := containerPort(pod, name); int(p) != side+r || cname != "engine" {
						t.Errorf("%s port %s is %d in %q; want the side channel %d + rank %d", role, name, p, cname, side, r)
					}
				}

				if sim {
					if !strings.HasPrefix(c.Image, "vllm-sim:") || c.Command != nil || f["--host"] != "0.0.0.0" ||
						f["--tokenizer"] != "hf:"+fleetModel || f["--model"] != fleetModel {
						t.Errorf("%s vllm-sim engine %s %q %q: want image vllm-sim, its entrypoint, --host 0.0.0.0, --model %s, --tokenizer hf:%s",
							role, c.Image, c.Command, c.Args, fleetModel, fleetModel)
					}
				} else {
					if c.Image != "vllm/vllm-openai:v0.32.0" || !slices.Equal(c.Command, []string{"vllm", "serve"}) || c.Args[0] != fleetModel ||
						f["--served-model-name"] != fleetModel {
						t.Errorf("%s vLLM engine %s %q %q: want vllm/vllm-openai:v0.32.0 running vllm serve %s", role, c.Image, c.Command, c.Args, fleetModel)
					}
					if _, ok := f["--host"]; ok {
						t.Errorf("%s vLLM --host %q: vLLM listens on every interface without it", role, f["--host"])
					}
					if _, ok := c.Resources.Limits["nvidia.com/gpu"]; !ok {
						t.Errorf("%s vLLM resources %+v: no GPU", role, c.Resources)
					}
				}
			}
		})
	}
}

// TestFleetSidecar: the prefill pods run pd-sidecar on the port their Services call http, dialling
// the pod's own endpoint (the prefill host the router names) at the local engine, with the pod's
// endpoint and the decode pods' headless Service as its allowlist; decode pods have no sidecar.
func TestFleetSidecar(t *testing.T) {
	for _, v := range fleetVariants() {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			objs := renderFleet(t, v)
			roles := fleetRoles(t, objs)
			svcs := fleetServices(t, objs)
			if n := len(roles["decode"].Spec.Template.Spec.Containers); n != 1 {
				t.Errorf("decode pods have %d containers; want the engine alone", n)
			}
			d := roles["prefill"]
			pod := &d.Spec.Template.Spec
			sc := container(t, d, "pd-sidecar")
			f := flagValues(t, sc.Args)
			if !strings.HasPrefix(sc.Image, "pd-sidecar:") {
				t.Errorf("pd-sidecar image %s", sc.Image)
			}
			httpPort, cname := containerPort(pod, "http")
			engine, _ := containerPort(pod, "engine-http")
			if cname != "pd-sidecar" || f["--listen"] != fmt.Sprintf("0.0.0.0:%d", httpPort) {
				t.Errorf("pd-sidecar --listen %s; the pod's port http is %d of %q", f["--listen"], httpPort, cname)
			}
			self := fmt.Sprintf("$(POD_IP):%d", httpPort)
			local := fmt.Sprintf("127.0.0.1:%d", engine)
			if f["--dial"] != self+"="+local || f["--default-decode-host"] != local {
				t.Errorf("pd-sidecar --dial %q --default-decode-host %q; want %s=%s and %s", f["--dial"], f["--default-decode-host"], self, local, local)
			}
			if e := envOf(sc)["POD_IP"]; e.ValueFrom == nil || e.ValueFrom.FieldRef.FieldPath != "status.podIP" {
				t.Errorf("pd-sidecar POD_IP %+v", e)
			}
			allow := strings.Split(f["--allow"], ",")
			decodePods := svcs["vllm-decode-pods"]
			decodeHTTP, _ := containerPort(&roles["decode"].Spec.Template.Spec, "http")
			wantDecode := fmt.Sprintf("vllm-decode-pods.%s.svc.cluster.local:%d", namespace, decodeHTTP)
			if !slices.Equal(allow, []string{self, wantDecode}) {
				t.Errorf("pd-sidecar --allow %q; want %s,%s", allow, self, wantDecode)
			}
			if decodePods == nil {
				t.Fatal("no Service vllm-decode-pods")
			}
			if decodePods.Spec.ClusterIP != corev1.ClusterIPNone || !serviceSelects(decodePods, roles["decode"]) {
				t.Errorf("Service vllm-decode-pods is not a headless Service of the decode pods (the allowlist resolves it to them): %+v", decodePods.Spec)
			}
			metrics, _ := containerPort(pod, "sidecar-metrics")
			if want := map[bool]string{true: "", false: fmt.Sprintf("0.0.0.0:%d", metrics)}[metrics == 0]; f["--admin-listen"] != want {
				t.Errorf("pd-sidecar --admin-listen %q; want %q", f["--admin-listen"], want)
			}
			if p := sc.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" || p.HTTPGet.Port.StrVal != "http" {
				t.Errorf("pd-sidecar readiness probe %+v; want GET /healthz on http", p)
			}
		})
	}
}

// serviceSelects reports whether Service s selects the pods of Deployment d.
func serviceSelects(s *corev1.Service, d *appsv1.Deployment) bool {
	return len(s.Spec.Selector) > 0 && labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels))
}

// endpointSlices builds the EndpointSlices Kubernetes's EndpointSlice controller would write for
// Service s over the fleet's pods: every pod the Service selects (replicas of its Deployment, pod
// IPs made up) with its ports named as the Service names them and numbered by resolving each
// targetPort against the pod spec, labelled kubernetes.io/service-name.
func endpointSlices(t *testing.T, s *corev1.Service, roles map[string]*appsv1.Deployment) []*discoveryv1.EndpointSlice {
	t.Helper()
	var out []*discoveryv1.EndpointSlice
	for i, role := range []string{"prefill", "decode"} {
		d := roles[role]
		if !serviceSelects(s, d) {
			continue
		}
		sl := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: s.Name + "-" + role, Namespace: s.Namespace, Labels: map[string]string{discoveryv1.LabelServiceName: s.Name}},
			AddressType: discoveryv1.AddressTypeIPv4,
		}
		for _, sp := range s.Spec.Ports {
			n, _ := targetPort(&d.Spec.Template.Spec, sp)
			if n == 0 {
				t.Errorf("Service %s port %s: targetPort %s names no port of the %s pods", s.Name, sp.Name, sp.TargetPort.String(), role)
				continue
			}
			sl.Ports = append(sl.Ports, discoveryv1.EndpointPort{Name: &sp.Name, Port: &n, Protocol: &sp.Protocol})
		}
		for j := range int(*d.Spec.Replicas) {
			ready := true
			sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.%d.0.%d", i+1, j+1)},
				Conditions: discoveryv1.EndpointConditions{Ready: &ready}})
		}
		out = append(out, sl)
	}
	return out
}

// TestFleetMatchesRouterDiscovery: with the router chart's discovery example, each entry's label
// selector matches exactly one Service of the fleet (by the label the EndpointSlice controller
// puts on its slices), that Service selects the entry's role's pods and no others, and pool/kube's
// Members (the router's own code) turns the slices the controller would write into one worker per
// pod whose endpoint is the role's HTTP container (pd-sidecar for prefill, vLLM for decode), whose
// KV event and replay endpoints are the engine's ports, and whose data-parallel size and batch
// budget are the engine's.
func TestFleetMatchesRouterDiscovery(t *testing.T) {
	cfg, _ := loadServeConfig(t, render(t, variant{name: "discovery", values: []string{"common.yaml", "discovery.yaml"}}))
	entries := cfg.Models[0].Discovery
	if len(entries) != 2 {
		t.Fatalf("discovery example has %d entries; want prefill and decode", len(entries))
	}
	for _, v := range fleetVariants() {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			objs := renderFleet(t, v)
			roles := fleetRoles(t, objs)
			svcs := fleetServices(t, objs)
			for _, e := range entries {
				sel, err := labels.Parse(e.Selector)
				if err != nil {
					t.Fatal(err)
				}
				var matched []*corev1.Service
				for _, s := range svcs {
					if sel.Matches(labels.Set{discoveryv1.LabelServiceName: s.Name, discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"}) {
						matched = append(matched, s)
					}
				}
				if len(matched) != 1 {
					t.Fatalf("entry %s selector %q matches %d fleet Services; want 1", e.Name, e.Selector, len(matched))
				}
				s := matched[0]
				other := map[pool.Role]string{pool.RolePrefill: "decode", pool.RoleDecode: "prefill"}[e.Role]
				if !serviceSelects(s, roles[string(e.Role)]) || serviceSelects(s, roles[other]) {
					t.Errorf("Service %s selector %v: must select the %s pods and not the %s pods", s.Name, s.Spec.Selector, e.Role, other)
				}
				d := roles[string(e.Role)]
				pod := &d.Spec.Template.Spec
				dp := atoi(t, "--data-parallel-size", flagValues(t, container(t, roles[string(e.Role)], "engine").Args)["--data-parallel-size"])
				if strings.Contains(v.name, "data_parallel") {
					e.DataParallelSize = dp
				}
				members, skips := kube.Members(e, endpointSlices(t, s, roles))
				if len(skips) > 0 {
					t.Errorf("entry %s skipped slices of %s: %+v", e.Name, s.Name, skips)
				}
				if len(members) != int(*d.Spec.Replicas) {
					t.Errorf("entry %s: %d workers from %d %s pods", e.Name, len(members), *d.Spec.Replicas, e.Role)
				}
				f := flagValues(t, container(t, d, "engine").Args)
				wantHTTP, wantContainer := containerPort(pod, "http")
				if want := map[pool.Role]string{pool.RolePrefill: "pd-sidecar", pool.RoleDecode: "engine"}[e.Role]; wantContainer != want {
					t.Errorf("entry %s: the %s pods' port http is in container %q; want %s", e.Name, e.Role, wantContainer, want)
				}
				events, _ := containerPort(pod, "kv-events")
				replay, _ := containerPort(pod, "kv-replay")
				for _, m := range members {
					w := m.Worker
					ap, err := netip.ParseAddrPort(w.Endpoint)
					if err != nil {
						t.Fatal(err)
					}
					host := ap.Addr().String()
					if w.Role != e.Role || ap.Port() != uint16(wantHTTP) ||
						w.KVEvents != "tcp://"+net.JoinHostPort(host, strconv.Itoa(int(events))) ||
						w.KVReplay != "tcp://"+net.JoinHostPort(host, strconv.Itoa(int(replay))) {
						t.Errorf("entry %s worker %+v; want role %s, endpoint port %d, KV events %d, replay %d", e.Name, w, e.Role, wantHTTP, events, replay)
					}
					// The example's entries have data_parallel_size 1, the default fleet's engines too;
					// the data-parallel variants are checked with the entry an operator writes for them.
					if got, want := max(w.DataParallelSize, 1), atoi(t, "--data-parallel-size", f["--data-parallel-size"]); got != want && !strings.Contains(v.name, "data_parallel") {
						t.Errorf("entry %s data_parallel_size %d; the engine's --data-parallel-size is %d", e.Name, got, want)
					}
					// Rank r of the worker subscribes at the KV events and replay ports + r: each is a
					// port the engine names for that rank.
					for r := range max(w.DataParallelSize, 1) {
						sfx := ""
						if r > 0 {
							sfx = "-" + strconv.Itoa(r)
						}
						pe, ce := containerPort(pod, "kv-events"+sfx)
						pr, cr := containerPort(pod, "kv-replay"+sfx)
						if pe != events+int32(r) || pr != replay+int32(r) || ce != "engine" || cr != "engine" {
							t.Errorf("entry %s rank %d subscribes at %d and %d; the engine names kv-events%s %d, kv-replay%s %d", e.Name, r, events+int32(r), replay+int32(r), sfx, pe, sfx, pr)
						}
					}
					if w.MaxNumBatchedTokens != 0 && strconv.FormatInt(w.MaxNumBatchedTokens, 10) != f["--max-num-batched-tokens"] {
						t.Errorf("entry %s max_num_batched_tokens %d; the engine's --max-num-batched-tokens is %s", e.Name, w.MaxNumBatchedTokens, f["--max-num-batched-tokens"])
					}
				}
			}
		})
	}
}

// TestFleetMatchesRouterStaticWorkers: the router chart's shared example names the fleet by DNS:
// each worker's endpoint, KV events and replay address is <Service>.llm.svc.cluster.local:<port>
// of a headless fleet Service (one address per pod) that selects the worker's role, on a Service
// port that reaches the right container; the gateways' decodeService and Envoy Gateway's
// prefillService are fleet Services on those ports.
func TestFleetMatchesRouterStaticWorkers(t *testing.T) {
	cfg, _ := loadServeConfig(t, render(t, variant{name: "common", values: []string{"common.yaml"}}))
	workers := cfg.Models[0].Pool.Workers
	objs := renderFleet(t, fleetVariants()[1])
	roles := fleetRoles(t, objs)
	svcs := fleetServices(t, objs)
	// resolve finds the fleet Service port host:port names and the pod port it reaches.
	resolve := func(what, hostport string, role string, headless bool) (int32, string) {
		t.Helper()
		host, port, err := net.SplitHostPort(strings.TrimPrefix(hostport, "tcp://"))
		if err != nil {
			t.Fatalf("%s %q: %v", what, hostport, err)
		}
		name, ok := strings.CutSuffix(host, "."+namespace+".svc.cluster.local")
		s := svcs[name]
		if !ok || s == nil {
			t.Fatalf("%s %q names no fleet Service in %s", what, hostport, namespace)
		}
		if headless != (s.Spec.ClusterIP == corev1.ClusterIPNone) || !serviceSelects(s, roles[role]) {
			t.Errorf("%s: Service %s (clusterIP %q) must be headless=%v and select the %s pods", what, name, s.Spec.ClusterIP, headless, role)
		}
		for _, sp := range s.Spec.Ports {
			if strconv.Itoa(int(sp.Port)) == port {
				return targetPort(&roles[role].Spec.Template.Spec, sp)
			}
		}
		t.Fatalf("%s %q: Service %s has no port %s", what, hostport, name, port)
		return 0, ""
	}
	if len(workers) != 2 {
		t.Fatalf("common.yaml workers %+v; want prefill and decode", workers)
	}
	for _, w := range workers {
		role := string(w.Role)
		pod := &roles[role].Spec.Template.Spec
		httpC := map[string]string{"prefill": "pd-sidecar", "decode": "engine"}[role]
		if p, c := resolve(w.Name+" endpoint", w.Endpoint, role, true); c != httpC {
			t.Errorf("worker %s endpoint %s reaches port %d of container %q; want %s", w.Name, w.Endpoint, p, c, httpC)
		}
		for what, pair := range map[string][2]string{"kv_events": {w.KVEvents, "kv-events"}, "kv_replay": {w.KVReplay, "kv-replay"}} {
			p, c := resolve(w.Name+" "+what, pair[0], role, true)
			if want, _ := containerPort(pod, pair[1]); p != want || c != "engine" {
				t.Errorf("worker %s %s %s reaches port %d of %q; want the engine's %s %d", w.Name, what, pair[0], p, c, pair[1], want)
			}
		}
	}
	for _, gw := range []struct {
		file, key, role, container string
	}{{"plain-envoy.yaml", "decodeService", "decode", "engine"}, {"envoy-gateway.yaml", "decodeService", "decode", "engine"},
		{"envoy-gateway.yaml", "prefillService", "prefill", "pd-sidecar"}} {
		vals := readValues(t, "examples/"+gw.file)
		ref := dig(t, vals, "gateway", gw.key).(map[string]any)
		hp := fmt.Sprintf("%s.%s.svc.cluster.local:%v", ref["name"], namespace, ref["port"])
		if _, c := resolve(gw.file+" "+gw.key, hp, gw.role, false); c != gw.container {
			t.Errorf("%s gateway.%s %s reaches container %q; want %s", gw.file, gw.key, hp, c, gw.container)
		}
	}
}

// readValues reads a values file as a generic document.
func readValues(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return m
}

// TestFleetRefusesBadValues: values.schema.json refuses misspelt keys and ill-typed values, the
// templates refuse what the schema cannot judge, each with a message naming the field.
func TestFleetRefusesBadValues(t *testing.T) {
	m := "model.name=" + fleetModel
	cases := map[string]struct {
		set  []string
		want string
	}{
		// values.schema.json
		"misspelt_key":       {[]string{m, "prefil.replicas=2"}, "additional properties 'prefil' not allowed"},
		"misspelt_role_key":  {[]string{m, "decode.dataParalellSize=2"}, "additional properties 'dataParalellSize' not allowed"},
		"unknown_engine":     {[]string{m, "engine.kind=sglang"}, "/engine/kind"},
		"block_size_zero":    {[]string{m, "blockSize=0"}, "/blockSize"},
		"port_out_of_range":  {[]string{m, "ports.kvEvents=70000"}, "/ports/kvEvents"},
		"dp_not_integer":     {[]string{m, "prefill.dataParallelSize=two"}, "/prefill/dataParallelSize"},
		"bad_duration":       {[]string{m, "sidecar.prefillTimeout=2 minutes"}, "/sidecar/prefillTimeout"},
		"bad_service_name":   {[]string{m, "services.decodePods=Vllm_Decode"}, "/services/decodePods"},
		"no_decode_pods_svc": {[]string{m, "services.decodePods="}, "/services/decodePods"},
		"env_no_name":        {[]string{m, "prefill.env[0].value=x"}, "at '/prefill/env/0': missing property 'name'"},
		"env_bad_name":       {[]string{m, "decode.env[0].name=UCX TLS", "decode.env[0].value=x"}, "/decode/env/0/name"},
		"time_scale_zero":    {[]string{m, "engine.vllmSim.timeScale=0"}, "/engine/vllmSim/timeScale"},
		// the templates' own checks
		"no_model":           {nil, "model.name: required: the model the engines serve"},
		"prefill_dp_zero":    {[]string{m, "prefill.dataParallelSize=0"}, "prefill.dataParallelSize: 0 must be at least 1"},
		"decode_dp_negative": {[]string{m, "decode.dataParallelSize=-2"}, "decode.dataParallelSize: -2 must be at least 1"},
		"rank_ports_overlap": {[]string{m, "decode.dataParallelSize=11"}, "ports.kvReplay: rank 0's port 5567 is also ports.kvEvents (rank 10)'s"},
		"port_taken":         {[]string{m, "ports.kvReplay=8100"}, "ports.kvReplay: port 8100 is also sidecar.port's"},
		"rank_past_65535":    {[]string{m, "ports.nixlSideChannel=65535", "prefill.dataParallelSize=2"}, "ports.nixlSideChannel: 65535 plus 2 data-parallel ranks passes 65535"},
		"kv_role_given":      {[]string{m, "prefill.kvTransferConfig.kv_role=kv_both"}, "prefill.kvTransferConfig.kv_role: set by the chart"},
		"kv_connector_given": {[]string{m, "decode.kvTransferConfig.kv_connector=LMCacheConnectorV1"}, "decode.kvTransferConfig.kv_connector: set by the chart"},
		"sim_path_model":     {[]string{"engine.kind=vllm-sim", "model.name=/models/qwen3"}, "model.tokenizer: required with engine.kind vllm-sim"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := helmRun(t, fleetVariant{name: name, set: c.set}.args()...)
			if err == nil {
				t.Fatalf("rendered with %v; want an error containing %q", c.set, c.want)
			}
			if !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "unable to parse YAML") {
				t.Errorf("error does not contain %q:\n%v", c.want, err)
			}
		})
	}
}

// TestFleetLints: `helm lint --strict` passes with the model set and with the vllm-sim example;
// on the bare defaults plain lint passes and prints the chart's message for the missing model,
// and `helm template` fails with it rather than a YAML error.
func TestFleetLints(t *testing.T) {
	for _, args := range [][]string{
		{"lint", "--strict", fleetChart, "--namespace", namespace, "--set", "model.name=" + fleetModel},
		{"lint", "--strict", fleetChart, "--namespace", namespace, "-f", fleetChart + "/examples/vllm-sim.yaml"},
	} {
		if _, err := helmRun(t, args...); err != nil {
			t.Error(err)
		}
	}
	for _, args := range [][]string{{"lint", fleetChart}, {"lint", "--strict", fleetChart}} {
		out := helmRunCombined(t, args...)
		if out.err != nil {
			t.Errorf("helm %s: %v\n%s", strings.Join(args, " "), out.err, out.out)
		}
		if !strings.Contains(out.out, "model.name: required") {
			t.Errorf("helm %s does not name model.name:\n%s", strings.Join(args, " "), out.out)
		}
	}
	_, err := helmRun(t, "template", fleetRelease, fleetChart, "--namespace", namespace)
	if err == nil || !strings.Contains(err.Error(), "model.name: required") {
		t.Errorf("helm template with the defaults: err = %v; want the chart's model.name message", err)
	}
}

// TestFleetEnginePolicy: the router chart's engineNetworkPolicy with examples/engine-policy.yaml
// selects the fleet's prefill and decode pods, admits only the router pods to exactly the ports
// the engines name kv-events and kv-replay, keeps the ports the pods name http and engine-http
// open, and lets the fleet's pods reach each other on every port (the NIXL side channel, named
// nixl, among them).
func TestFleetEnginePolicy(t *testing.T) {
	router := render(t, variant{name: "engine_policy", values: []string{"common.yaml", "engine-policy.yaml"}})
	v, err := decodeStrict(find(t, router, "NetworkPolicy", release+"-engines"))
	if err != nil {
		t.Fatal(err)
	}
	np := v.(*networkingv1.NetworkPolicy)
	roles := fleetRoles(t, renderFleet(t, fleetVariants()[0]))
	podSel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil {
		t.Fatal(err)
	}
	var events, open []int32
	for role, d := range roles {
		if !podSel.Matches(labels.Set(d.Spec.Template.Labels)) {
			t.Errorf("engine policy podSelector %v does not select the %s pods %v", np.Spec.PodSelector, role, d.Spec.Template.Labels)
		}
		pod := &d.Spec.Template.Spec
		for _, name := range []string{"kv-events", "kv-replay"} {
			p, _ := containerPort(pod, name)
			events = append(events, p)
		}
		for _, name := range []string{"http", "engine-http"} {
			if p, _ := containerPort(pod, name); p != 0 {
				open = append(open, p)
			}
		}
	}
	portsOf := func(r networkingv1.NetworkPolicyIngressRule) []int32 {
		var ps []int32
		for _, p := range r.Ports {
			ps = append(ps, p.Port.IntVal)
		}
		slices.Sort(ps)
		return slices.Compact(ps)
	}
	slices.Sort(events)
	events = slices.Compact(events)
	slices.Sort(open)
	open = slices.Compact(open)
	var sawEvents, sawOpen, sawPeers bool
	for _, r := range np.Spec.Ingress {
		switch {
		case slices.Equal(portsOf(r), events):
			sawEvents = true
			if len(r.From) != 1 || r.From[0].PodSelector == nil || r.From[0].PodSelector.MatchLabels["app.kubernetes.io/component"] != "router" {
				t.Errorf("event ports %v admitted from %+v; want the router pods only", events, r.From)
			}
		case slices.Equal(portsOf(r), open) && len(r.From) == 0:
			sawOpen = true
		case len(r.Ports) == 0 && len(r.From) == 1 && r.From[0].PodSelector != nil:
			peers, err := metav1.LabelSelectorAsSelector(r.From[0].PodSelector)
			if err != nil {
				t.Fatal(err)
			}
			sawPeers = peers.Matches(labels.Set(roles["decode"].Spec.Template.Labels)) && peers.Matches(labels.Set(roles["prefill"].Spec.Template.Labels))
		default:
			for _, p := range r.Ports {
				if slices.Contains(events, p.Port.IntVal) {
					t.Errorf("rule %+v opens event port %d", r, p.Port.IntVal)
				}
			}
		}
	}
	if !sawEvents || !sawOpen || !sawPeers {
		t.Errorf("engine policy ingress %+v: event ports %v to the router %v, HTTP ports %v open %v, fleet pods to each other %v",
			np.Spec.Ingress, events, sawEvents, open, sawOpen, sawPeers)
	}
}

// TestFleetInferencePool: the router chart's InferencePool (examples/inference-pool.yaml) selects
// the fleet's prefill and decode pods, and its target ports are the ports the fleet's pods name
// http: the decode engines' and the prefill pd-sidecars', the endpoints condisagg picks.
func TestFleetInferencePool(t *testing.T) {
	router := render(t, variant{name: "inference_pool", values: []string{"common.yaml", "inference-pool.yaml"}})
	pool := find(t, router, "InferencePool", "vllm")
	if _, err := decodeStrict(pool); err != nil {
		t.Fatal(err)
	}
	sel := labels.Set{}
	for k, v := range dig(t, pool.Doc, "spec", "selector", "matchLabels").(map[string]any) {
		sel[k] = v.(string)
	}
	var targets []int32
	for _, p := range dig(t, pool.Doc, "spec", "targetPorts").([]any) {
		targets = append(targets, int32(p.(map[string]any)["number"].(float64)))
	}
	for _, v := range fleetVariants() {
		for role, d := range fleetRoles(t, renderFleet(t, v)) {
			if !labels.SelectorFromSet(sel).Matches(labels.Set(d.Spec.Template.Labels)) {
				t.Errorf("%s: InferencePool selector %v does not select the %s pods %v", v.name, sel, role, d.Spec.Template.Labels)
			}
			if p, _ := containerPort(&d.Spec.Template.Spec, "http"); !slices.Contains(targets, p) {
				t.Errorf("%s: the %s pods' http port %d is not an InferencePool target port %v", v.name, role, p, targets)
			}
		}
	}
}
