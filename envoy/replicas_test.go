package envoy

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// TestExtProcReplicas: ExtProcReplicas become further hosts of the condisagg cluster, after
// ExtProc and in order (STRICT_DNS as soon as one is a name); the result passes envoy
// --mode validate; a bad replica endpoint is refused by its index.
func TestExtProcReplicas(t *testing.T) {
	bin := envoyBin(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	for _, tc := range []struct {
		replicas []Endpoint
		typ      string
	}{
		{[]Endpoint{{Host: "127.0.0.1", Port: 9003}, {Host: "127.0.0.1", Port: 9004}}, "STATIC"},
		{[]Endpoint{{Host: "condisagg-1.llm.svc", Port: 9002}}, "STRICT_DNS"},
	} {
		p := testParams(Buffered, FailOpen)
		p.ExtProcReplicas = tc.replicas
		out, err := Render(p)
		if err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		if err := yaml.Unmarshal(out, &doc); err != nil {
			t.Fatal(err)
		}
		var ext any
		for _, c := range dig(t, doc, "static_resources", "clusters").([]any) {
			if dig(t, c, "name") == "condisagg" {
				ext = c
			}
		}
		if ext == nil {
			t.Fatal("no condisagg cluster")
		}
		if typ := dig(t, ext, "type"); typ != tc.typ {
			t.Errorf("condisagg cluster type %v; want %s", typ, tc.typ)
		}
		var got []string
		for _, e := range dig(t, ext, "load_assignment", "endpoints", 0, "lb_endpoints").([]any) {
			sa := dig(t, e, "endpoint", "address", "socket_address")
			got = append(got, fmt.Sprintf("%v:%v", dig(t, sa, "address"), dig(t, sa, "port_value")))
		}
		want := []string{p.ExtProc.String()}
		for _, r := range tc.replicas {
			want = append(want, r.String())
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("condisagg hosts %v; want %v", got, want)
		}
		path, err := WriteBootstrap(t.TempDir(), p)
		if err != nil {
			t.Fatal(err)
		}
		if err := Validate(ctx, bin, path); err != nil {
			t.Fatal(err)
		}
	}
	p := testParams(Buffered, FailOpen)
	p.ExtProcReplicas = []Endpoint{{Host: "127.0.0.1", Port: 9003}, {Host: "bad host", Port: 0}}
	if _, err := Render(p); err == nil || !strings.Contains(err.Error(), "ext_proc_replicas[1].host") ||
		!strings.Contains(err.Error(), "ext_proc_replicas[1].port") {
		t.Errorf("Render with a bad replica: %v; want ext_proc_replicas[1] host and port named", err)
	}
}
