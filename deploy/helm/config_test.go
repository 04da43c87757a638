package helm

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/condisagg/condisagg/server/config"
)

// routerPod returns the condisagg Deployment's pod spec and its container, strictly decoded.
func routerPod(t *testing.T, objs []object) (*corev1.PodSpec, *corev1.Container) {
	t.Helper()
	v, err := decodeStrict(find(t, objs, "Deployment", release))
	if err != nil {
		t.Fatal(err)
	}
	spec := &v.(*appsv1.Deployment).Spec.Template.Spec
	for i := range spec.Containers {
		if spec.Containers[i].Name == "condisagg" {
			return spec, &spec.Containers[i]
		}
	}
	t.Fatal("Deployment condisagg has no container condisagg")
	return nil, nil
}

// serveConfigText returns the serve config of the ConfigMap and the path the container reads it at.
func serveConfigText(t *testing.T, objs []object, c *corev1.Container) (string, string) {
	t.Helper()
	i := slices.Index(c.Args, "--config")
	if i < 0 || i+1 >= len(c.Args) {
		t.Fatalf("container args %v have no --config", c.Args)
	}
	text, ok := dig(t, find(t, objs, "ConfigMap", release).Doc, "data", filepath.Base(c.Args[i+1])).(string)
	if !ok {
		t.Fatalf("ConfigMap %s has no key %s", release, filepath.Base(c.Args[i+1]))
	}
	return text, c.Args[i+1]
}

// volumeAt returns the volume mounted at the directory holding path in container c.
func volumeAt(t *testing.T, pod *corev1.PodSpec, c *corev1.Container, path string) corev1.Volume {
	t.Helper()
	for _, m := range c.VolumeMounts {
		if path == m.MountPath || strings.HasPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/") {
			for _, v := range pod.Volumes {
				if v.Name == m.Name {
					return v
				}
			}
			t.Fatalf("mount %s names no volume %s", m.MountPath, m.Name)
		}
	}
	t.Fatalf("%s is under no volume mount of container %s", path, c.Name)
	return corev1.Volume{}
}

// loadServeConfig checks that every file the rendered serve config names is in the pod (the config
// in the ConfigMap, the tokenizer in the model volume, the token in the Secret), then loads the
// config through server/config with those paths pointed at local stand-ins.
func loadServeConfig(t *testing.T, objs []object) (*config.Config, map[string]any) {
	t.Helper()
	pod, c := routerPod(t, objs)
	text, cfgPath := serveConfigText(t, objs, c)
	if v := volumeAt(t, pod, c, cfgPath); v.ConfigMap == nil || v.ConfigMap.Name != release {
		t.Errorf("--config %s is not in ConfigMap %s: volume %+v", cfgPath, release, v.VolumeSource)
	}
	var doc map[string]any
	if err := yaml.Unmarshal([]byte(text), &doc); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	model := doc["model"].(map[string]any)
	if tok := model["tokenizer"].(string); strings.HasPrefix(tok, "hf:") {
		// Fetched at start into the hub cache, which must be on the writable model volume.
		cache := envOf(c)["HF_HUB_CACHE"].Value
		if v := volumeAt(t, pod, c, cache+"/x"); v.Name != "model" || mountOf(c, "model").ReadOnly {
			t.Errorf("HF_HUB_CACHE %q is not on the writable model volume: %+v", cache, v)
		}
	} else {
		if v := volumeAt(t, pod, c, tok); v.Name != "model" || v.PersistentVolumeClaim == nil {
			t.Errorf("model.tokenizer %v is not in the model volume: %+v", tok, v)
		}
		model["tokenizer"] = dir // server/config only checks that the directory exists
	}
	tokenPath := doc["admin_token_file"].(string)
	v := volumeAt(t, pod, c, tokenPath)
	if v.Secret == nil {
		t.Fatalf("admin_token_file %s is not in a Secret volume: %+v", tokenPath, v)
	}
	for _, secret := range objs { // absent when admin.token.existingSecret names one
		if secret.Kind != "Secret" || secret.Name != v.Secret.SecretName {
			continue
		}
		if _, ok := dig(t, secret.Doc, "data", filepath.Base(tokenPath)).(string); !ok {
			t.Errorf("Secret %s has no key %s (admin_token_file)", v.Secret.SecretName, filepath.Base(tokenPath))
		}
	}
	doc["admin_token_file"] = writeFile(t, dir, "token", "0123456789abcdef0123456789abcdef\n")
	out, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	f := config.NewFlags()
	if err := f.FS.Parse([]string{"--config", writeFile(t, dir, "condisagg.yaml", string(out))}); err != nil {
		t.Fatal(err)
	}
	cfg, err := f.Load()
	if err != nil {
		t.Fatalf("rendered serve config refused by server/config:\n%v\n%s", err, text)
	}
	return cfg, doc
}

// envOf is container c's environment by name.
func envOf(c *corev1.Container) map[string]corev1.EnvVar {
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	return env
}

// mountOf is container c's mount of volume name (the zero mount when there is none).
func mountOf(c *corev1.Container, name string) corev1.VolumeMount {
	for _, m := range c.VolumeMounts {
		if m.Name == name {
			return m
		}
	}
	return corev1.VolumeMount{}
}

func writeFile(t *testing.T, dir, name, text string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestChartServeConfigLoads: the serve config rendered by every variant passes condisagg's own
// validation, and its listeners are the container's ports.
func TestChartServeConfigLoads(t *testing.T) {
	for _, v := range variants() {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			objs := render(t, v)
			cfg, _ := loadServeConfig(t, objs)
			_, c := routerPod(t, objs)
			ports := map[string]int32{}
			for _, p := range c.Ports {
				ports[p.Name] = p.ContainerPort
			}
			for name, addr := range map[string]string{"grpc-extproc": cfg.Listen, "http-admin": cfg.AdminListen} {
				_, port, _ := net.SplitHostPort(addr)
				if port != itoa32(ports[name]) {
					t.Errorf("container port %s = %d; the config listens on %s", name, ports[name], addr)
				}
			}
			if cfg.Admin.Token == "" {
				t.Error("admin HTTP is off loopback (probes, Prometheus) but no admin token is configured")
			}
		})
	}
}

// TestChartProbes: startup and liveness on /healthz, readiness on /readyz, all on the admin port.
func TestChartProbes(t *testing.T) {
	objs := render(t, variantNamed(t, "no_gateway"))
	_, c := routerPod(t, objs)
	for name, want := range map[string]struct {
		probe *corev1.Probe
		path  string
	}{"startup": {c.StartupProbe, "/healthz"}, "liveness": {c.LivenessProbe, "/healthz"}, "readiness": {c.ReadinessProbe, "/readyz"}} {
		if want.probe == nil || want.probe.HTTPGet == nil {
			t.Errorf("%s probe missing or not httpGet", name)
			continue
		}
		if g := want.probe.HTTPGet; g.Path != want.path || g.Port.String() != "http-admin" {
			t.Errorf("%s probe = %s on port %s; want %s on http-admin", name, g.Path, g.Port.String(), want.path)
		}
	}
}

func yamlMarshal(v any) ([]byte, error) { return yaml.Marshal(v) }

// TestChartHubTokenizer: with model.hub the serve config names the Hub model, the hub cache is on
// a writable emptyDir model volume, the Hub token comes from its Secret, and no tokenizer
// directory is mounted read-only; without it the model volume stays read-only.
func TestChartHubTokenizer(t *testing.T) {
	objs := render(t, variantNamed(t, "hub_tokenizer"))
	pod, c := routerPod(t, objs)
	cfg, _ := loadServeConfig(t, objs)
	if got := cfg.Models[0].Tokenizer; got != hubModel {
		t.Errorf("model.tokenizer = %q; want %q", got, hubModel)
	}
	env := envOf(c)
	if env["HF_HUB_CACHE"].Value != "/models/hub" {
		t.Errorf("HF_HUB_CACHE = %+v", env["HF_HUB_CACHE"])
	}
	if ref := env["HF_TOKEN"].ValueFrom; ref == nil || ref.SecretKeyRef == nil || ref.SecretKeyRef.Name != "hf-token" || ref.SecretKeyRef.Key != "token" {
		t.Errorf("HF_TOKEN = %+v; want the key token of Secret hf-token", env["HF_TOKEN"])
	}
	if _, ok := env["HF_HUB_OFFLINE"]; ok {
		t.Error("HF_HUB_OFFLINE set: the start could not fetch")
	}
	if v := volumeAt(t, pod, c, "/models/hub/x"); v.EmptyDir == nil {
		t.Errorf("the hub cache volume is %+v; want an emptyDir", v.VolumeSource)
	}

	_, c = routerPod(t, render(t, variantNamed(t, "no_gateway")))
	if m := mountOf(c, "model"); !m.ReadOnly {
		t.Errorf("a tokenizer directory volume is mounted writable: %+v", m)
	}
	if _, ok := envOf(c)["HF_HUB_CACHE"]; ok {
		t.Error("HF_HUB_CACHE set without model.hub")
	}
}
