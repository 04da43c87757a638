package helm

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/condisagg/condisagg/envoy"
)

var update = flag.Bool("update", false, "rewrite the chart's generated bootstrap files")

// The chart's bootstrap files are envoy.Render output for these placeholder endpoints; the
// template replaces them with the release's (templates/gateway-envoy.yaml).
const (
	extProcPlaceholder = "condisagg-extproc.placeholder.invalid"
	decodePlaceholder  = "condisagg-decode.placeholder.invalid"
	extProcPortHolder  = 59002
	decodePortHolder   = 59800
	listenPortHolder   = 59080
)

// bootstrapParams are the envoy.Params of the plain-Envoy gateway for mode ("buffered" or
// "full-duplex"): the production shape of envoy/examples/plain-envoy.
func bootstrapParams(mode string, extProc, decode envoy.Endpoint, listenPort int) envoy.Params {
	p := envoy.Params{
		Proxy: envoy.Proxy{
			Listen:        envoy.Endpoint{Host: "0.0.0.0", Port: listenPort},
			Admin:         envoy.Endpoint{Host: "127.0.0.1", Port: 9901},
			AccessLogPath: "/dev/stdout",
		},
		// The chart's headless Service: one address per ready router pod.
		ExtProc:                   extProc,
		ExtProcResolvesToReplicas: true,
	}
	if mode == "full-duplex" {
		p.Mode, p.FailOpen = envoy.FullDuplex, envoy.FailClosed
		return p
	}
	p.Mode, p.FailOpen = envoy.Buffered, envoy.FailOpen
	p.DecodeFallback = []envoy.Endpoint{decode}
	return p
}

var bootstrapModes = []string{"buffered", "full-duplex"}

// TestBootstrapFilesAreCurrent keeps condisagg/files/envoy-bootstrap-*.yaml equal to Render's
// output for the placeholders (go test ./helm -update rewrites them), and checks that each
// placeholder port occurs only where the template substitutes it.
func TestBootstrapFilesAreCurrent(t *testing.T) {
	for _, mode := range bootstrapModes {
		p := bootstrapParams(mode, envoy.Endpoint{Host: extProcPlaceholder, Port: extProcPortHolder},
			envoy.Endpoint{Host: decodePlaceholder, Port: decodePortHolder}, listenPortHolder)
		out, err := envoy.Render(p)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(chartDir, "files", "envoy-bootstrap-"+mode+".yaml")
		if *update {
			if err := os.WriteFile(path, out, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		have, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test ./helm -run BootstrapFiles -update in deploy/)", err)
		}
		if !bytes.Equal(have, out) {
			t.Errorf("%s is stale: run go test ./helm -run BootstrapFiles -update in deploy/", path)
		}
		for _, port := range []string{"59002", "59800", "59080"} {
			if n, m := strings.Count(string(out), port), strings.Count(string(out), "port_value: "+port); n != m {
				t.Errorf("%s: %s occurs %d times, only %d as port_value: the template would miss some", path, port, n, m)
			}
		}
	}
}

// bootstrapOf returns the bootstrap the chart rendered into the Envoy ConfigMap.
func bootstrapOf(t *testing.T, objs []object, fullname string) string {
	t.Helper()
	b, ok := dig(t, find(t, objs, "ConfigMap", fullname+"-envoy").Doc, "data", "bootstrap.yaml").(string)
	if !ok {
		t.Fatal("ConfigMap condisagg-envoy has no data.bootstrap.yaml")
	}
	return b
}

// TestChartBootstrapIsRender: for the example values and for other names, namespaces and ports,
// the chart's bootstrap is byte for byte what envoy.Render makes for the same endpoints, and the
// real Envoy accepts the example's (envoy --mode validate).
func TestChartBootstrapIsRender(t *testing.T) {
	envoyBin, err := envoy.FindBinary()
	if err != nil {
		t.Fatal(err)
	}
	type tc struct {
		mode, ns, rel string
		fullname      string
		set           []string
		extProc       envoy.Endpoint
		decode        envoy.Endpoint
		listen        int
	}
	cases := map[string]tc{}
	for _, mode := range bootstrapModes {
		cases[mode+"/example"] = tc{mode: mode, ns: namespace, rel: release, fullname: release,
			extProc: envoy.Endpoint{Host: "condisagg-pods.llm.svc.cluster.local", Port: 9002},
			decode:  envoy.Endpoint{Host: "vllm-decode.llm.svc.cluster.local", Port: 8000}, listen: 8080}
		cases[mode+"/other_names_and_ports"] = tc{mode: mode, ns: "serving", rel: "edge", fullname: "edge-condisagg",
			set:     []string{"ports.extProc=7002", "gateway.decodeService.name=dec", "gateway.decodeService.port=9000", "gateway.envoy.listenPort=10000"},
			extProc: envoy.Endpoint{Host: "edge-condisagg-pods.serving.svc.cluster.local", Port: 7002},
			decode:  envoy.Endpoint{Host: "dec.serving.svc.cluster.local", Port: 9000}, listen: 10000}
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			args := []string{"template", c.rel, chartDir, "--namespace", c.ns,
				"-f", filepath.Join("examples", "common.yaml"), "-f", filepath.Join("examples", "plain-envoy.yaml"),
				"--set", "gateway.envoy.mode=" + c.mode}
			for _, s := range c.set {
				args = append(args, "--set", s)
			}
			out, err := helmRun(t, args...)
			if err != nil {
				t.Fatal(err)
			}
			objs := splitObjects(t, out)
			got := bootstrapOf(t, objs, c.fullname)
			want, err := envoy.Render(bootstrapParams(c.mode, c.extProc, c.decode, c.listen))
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Fatalf("chart bootstrap differs from envoy.Render:\n%s", firstDiff(got, string(want)))
			}
			if c.rel != release {
				return // byte-identical to Render's output, which the envoy package validates
			}
			path := filepath.Join(t.TempDir(), "bootstrap.yaml")
			if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := envoy.Validate(context.Background(), envoyBin, path); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// firstDiff shows the first differing line of a and b.
func firstDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < len(al) && i < len(bl); i++ {
		if al[i] != bl[i] {
			return "line " + strconv.Itoa(i+1) + ":\n got " + al[i] + "\nwant " + bl[i]
		}
	}
	return "lengths differ: " + strconv.Itoa(len(al)) + " vs " + strconv.Itoa(len(bl)) + " lines"
}
