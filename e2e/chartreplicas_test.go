package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"gopkg.in/yaml.v3"

	"github.com/condisagg/condisagg/envoy"
	"github.com/condisagg/condisagg/internal/repo"
)

// The chart's Envoy in front of two replicas found through DNS (issue 28): the pods' headless
// Service is played by a DNS server in the test that answers the chart's name with two
// loopback addresses, one replica listening on each at the same port.
const (
	chartRelease   = "condisagg"
	chartNamespace = "llm"
	// chartPodsHost is the headless Service's name as the chart renders it for this release
	// and namespace (deploy/helm TestChartEnvoySeesEveryReplica checks the chart side).
	chartPodsHost = chartRelease + "-pods." + chartNamespace + ".svc.cluster.local"
)

// chartReplicaHosts are the two replicas' addresses, as two pods' IPs.
var chartReplicaHosts = []string{"127.0.0.1", "127.0.0.2"}

// TestChartEnvoyReplicaKill renders the Helm chart's Envoy bootstrap with helm template
// (gateway.type envoy, buffered fail-open and full-duplex fail-closed), points only what a
// test must at loopback (listener and admin on 127.0.0.1, the fail-open decode cluster at the
// simulated decode workers, and the ext_proc cluster's resolver at the test's DNS server;
// the cluster, its DNS settings, ejection and replay are the chart's), and runs the real
// Envoy in front of two condisagg replicas. It shows that Envoy resolves the name to two hosts,
// both replicas decide requests, and kill -9 of one under streaming load costs what
// TestReplicaKill's static two-host cluster costs: fail-open, nothing; fail-closed, at most
// the requests in flight at the kill; no request started after the replica was reaped fails
// or goes undecided; and Envoy ejected the dead replica (its own counter). About 30 s in
// all. CHAOS=full (make chaos) runs it with the chaos suite's background load and timing, and
// CHAOS_REPLICA_REPORT=path writes its table.
func TestChartEnvoyReplicaKill(t *testing.T) {
	size := chaosSizeFor(t)
	clients, before, after, maxTokens, timeScale := killClients, killBefore, killAfter, 48, 1.0
	if size.name == "full" {
		clients, before, after, maxTokens, timeScale = size.background, size.before, size.after, size.maxTokens, size.timeScale
	}
	var rows []string
	wall := time.Now()
	for _, failOpen := range []bool{true, false} {
		name := map[bool]string{true: "fail_open", false: "fail_closed"}[failOpen]
		t.Run(name, func(t *testing.T) {
			rows = append(rows, chartReplicaKill(t, failOpen, clients, before, after, maxTokens, timeScale))
		})
	}
	if path := os.Getenv("CHAOS_REPLICA_REPORT"); path != "" {
		report := fmt.Sprintf("Replica kill through the Helm chart's Envoy (`TestChartEnvoyReplicaKill`): two condisagg replicas behind one "+
			"DNS name (the headless Service, served by the test), %d streaming clients, kill -9 of one replica %v into the load, %v of "+
			"load after it, max_tokens %d, engines at time scale %g; wall time %s.\n\n"+
			"| scenario | requests | failed | in flight at the kill | failed or undecided, started after the reap | undecided (fail-open fallback) | decisions before the kill (replica 0 / 1) | Envoy ejections | ext_proc retries (succeeded) |\n"+
			"| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |\n%s",
			clients, before, after, maxTokens, timeScale, time.Since(wall).Round(time.Second), strings.Join(rows, ""))
		if err := os.WriteFile(path, []byte(report), 0o644); err != nil {
			t.Error(err)
		}
	}
}

func chartReplicaKill(t *testing.T, failOpen bool, clients int, before, after time.Duration, maxTokens int, timeScale float64) string {
	s := startStack(t, Config{
		Disagg: mainDisagg, Replicas: 2, ReplicaHosts: chartReplicaHosts, NoEnvoy: true, TimeScale: timeScale,
		Workers: []WorkerSpec{
			{Name: "prefill-0", Role: Prefill, MaxNumBatchedTokens: prefillMNBT},
			{Name: "decode-0", Role: Decode, NumGPUBlocks: decodeKVBlocks},
			{Name: "decode-1", Role: Decode, NumGPUBlocks: decodeKVBlocks},
		},
	})
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	var addrs []netip.Addr
	for _, h := range chartReplicaHosts {
		addrs = append(addrs, netip.MustParseAddr(h))
	}
	dns := startTestDNS(t, chartPodsHost, addrs)
	env := startChartEnvoy(t, ctx, s, failOpen, dns.addr())
	mode := map[bool]string{true: "fail-open", false: "fail-closed"}[failOpen]

	// Envoy resolved the name to both addresses and health-checked both.
	if err := Poll(ctx, func() error {
		total, err1 := env.Counter(ctx, "cluster.condisagg.membership_total")
		healthy, err2 := env.Counter(ctx, "cluster.condisagg.membership_healthy")
		if err := errors.Join(err1, err2); err != nil {
			return err
		}
		if total != 2 || healthy != 2 {
			return fmt.Errorf("cluster condisagg has %d hosts, %d healthy; want 2 and 2 (%d DNS queries answered)", total, healthy, dns.queries.Load())
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	decisions := func(r *Replica) float64 {
		v, err := s.metric(ctx, "http://"+r.AdminAddr+"/metrics", "condisagg_decisions_total")
		if err != nil {
			t.Errorf("replica %s: %v", r.GRPCAddr, err)
		}
		return v
	}
	d0, d1 := decisions(s.Replicas[0]), decisions(s.Replicas[1])
	c := newChaosClient(s, 3*time.Minute)
	c.nameEnvoy(env, "the chart's "+map[bool]string{true: "buffered", false: "full-duplex"}[failOpen]+" Envoy")
	defer c.close()
	stopLoad := killLoad(c, env, clients, maxTokens)
	time.Sleep(before)
	d0, d1 = decisions(s.Replicas[0])-d0, decisions(s.Replicas[1])-d1
	queriesBefore := dns.queries.Load()
	killed := time.Now()
	s.Replicas[1].Proc.Kill()
	dead := time.Now()
	time.Sleep(after)
	stopLoad()
	k := tallyKill(c.take(), killed, dead)

	stats := map[string]uint64{}
	for _, n := range []string{"outlier_detection.ejections_enforced_consecutive_local_origin_failure", "upstream_rq_retry", "upstream_rq_retry_success",
		"upstream_cx_connect_fail", "membership_total", "membership_healthy"} {
		v, err := env.Counter(ctx, "cluster.condisagg."+n)
		if err != nil && !errors.Is(err, envoy.ErrNoStat) {
			t.Fatal(err)
		}
		stats[n] = v
	}
	t.Logf("%s, chart's Envoy, kill -9 of replica %s of 2 (%d clients): %d requests (median %v), %d failed (%d of them started after the kill), %d answered without a decision, "+
		"%d in flight at the kill (reaped %v after it), %d affected that started after; last request the kill cost started %v after it; "+
		"decisions before the kill %g / %g; %d DNS queries answered (%d before the kill)",
		mode, chartReplicaHosts[1], clients, k.total, k.p50.Round(time.Millisecond), k.failed, k.failedAfter, k.undecided, k.inflight, dead.Sub(killed).Round(time.Millisecond), k.afterDeath,
		k.sinceKill.Round(time.Millisecond), d0, d1, dns.queries.Load(), queriesBefore)
	for _, f := range k.firsts {
		t.Logf("  failed: %s", f)
	}
	t.Logf("%s: Envoy cluster.condisagg: %v", mode, stats)

	// Both replicas decided requests: Envoy balances streams across the two hosts of one name.
	if d0 < 1 || d1 < 1 {
		t.Errorf("%s: decisions before the kill %g on %s and %g on %s; want both replicas deciding", mode, d0, chartReplicaHosts[0], d1, chartReplicaHosts[1])
	}
	if queriesBefore < 2 {
		t.Errorf("%s: Envoy resolved %s %d times before the kill; want it re-resolved at the record's TTL", mode, chartPodsHost, queriesBefore)
	}
	if failOpen && k.failed > 0 {
		t.Errorf("fail-open: %d of %d requests failed across the kill of one replica", k.failed, k.total)
	}
	if k.afterDeath > 0 {
		t.Errorf("%s: %d requests started after the replica died failed or went undecided (the last %v after the kill)", mode, k.afterDeath, k.sinceKill)
	}
	if k.failed > k.inflight {
		t.Errorf("%s: %d requests failed, more than the %d in flight at the kill", mode, k.failed, k.inflight)
	}
	if stats["outlier_detection.ejections_enforced_consecutive_local_origin_failure"] < 1 {
		t.Errorf("%s: Envoy never ejected the dead replica: %v", mode, stats)
	}
	return fmt.Sprintf("| replica_kill_%s | %d | %d | %d | %d | %d | %g / %g | %d | %d (%d) |\n", strings.ReplaceAll(mode, "-", "_"),
		k.total, k.failed, k.inflight, k.afterDeath, k.undecided, d0, d1,
		stats["outlier_detection.ejections_enforced_consecutive_local_origin_failure"], stats["upstream_rq_retry"], stats["upstream_rq_retry_success"])
}

// helmBinary finds helm as the deploy module's tests do: $HELM_BIN, else $TOOLS_BIN/helm, else
// <repo>/.tools/bin/helm (scripts/install-tools.sh, run by make deps).
func helmBinary() (string, error) {
	if p := os.Getenv("HELM_BIN"); p != "" {
		return p, nil
	}
	dir := os.Getenv("TOOLS_BIN")
	if dir == "" {
		root, err := repo.Root()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(root, ".tools", "bin")
	}
	p := filepath.Join(dir, "helm")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("e2e: helm not found (%w): run make deps, or set HELM_BIN", err)
	}
	return p, nil
}

// startChartEnvoy renders the chart's plain-Envoy bootstrap (deploy/helm/examples values,
// the stack's ext_proc port) and starts Envoy on it, with the loopback changes described on
// TestChartEnvoyReplicaKill.
func startChartEnvoy(t *testing.T, ctx context.Context, s *Stack, failOpen bool, resolver netip.AddrPort) *envoy.Process {
	t.Helper()
	helm, err := helmBinary()
	if err != nil {
		t.Fatal(err)
	}
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	examples := filepath.Join(root, "deploy", "helm", "examples")
	mode := map[bool]string{true: "buffered", false: "full-duplex"}[failOpen]
	cmd := exec.CommandContext(ctx, helm, "template", chartRelease, filepath.Join(root, "deploy", "helm", "condisagg"), "--namespace", chartNamespace,
		"-f", filepath.Join(examples, "common.yaml"), "-f", filepath.Join(examples, "plain-envoy.yaml"),
		"--set", "gateway.envoy.mode="+mode, "--set", "ports.extProc="+strconv.Itoa(s.extProcPort),
		"--show-only", "templates/gateway-envoy.yaml")
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("helm template: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("helm template: %v", err)
	}
	var bootstrap string
	for doc := range strings.SplitSeq(string(out), "\n---") {
		var cm struct {
			Kind     string
			Metadata struct{ Name string }
			Data     map[string]string
		}
		if yaml.Unmarshal([]byte(doc), &cm) == nil && cm.Kind == "ConfigMap" && cm.Metadata.Name == chartRelease+"-envoy" {
			bootstrap = cm.Data["bootstrap.yaml"]
		}
	}
	if bootstrap == "" {
		t.Fatalf("helm template rendered no ConfigMap %s-envoy with bootstrap.yaml:\n%s", chartRelease, out)
	}
	var doc map[string]any
	if err := yaml.Unmarshal([]byte(bootstrap), &doc); err != nil {
		t.Fatal(err)
	}
	loopback := map[string]any{"socket_address": map[string]any{"address": "127.0.0.1", "port_value": 0}}
	setPath(t, doc, loopback, "admin", "address")
	setPath(t, doc, loopback, "static_resources", "listeners", 0, "address")
	// The access log goes to a file, as a container runtime takes the pod's stdout: on
	// /dev/stdout, the pipe to this test process paced every request.
	dir := t.TempDir()
	hcm := getPath(t, doc, "static_resources", "listeners", 0, "filter_chains", 0, "filters", 0, "typed_config")
	setPath(t, hcm, filepath.Join(dir, "access.log"), "access_log", 0, "typed_config", "path")
	for _, c := range getPath(t, doc, "static_resources", "clusters").([]any) {
		cl := c.(map[string]any)
		switch cl["name"] {
		case "decode_fallback":
			var eps []any
			for _, w := range s.Workers {
				if w.Spec.Role != Decode {
					continue
				}
				e, err := envoy.ParseEndpoint(w.SimAddr)
				if err != nil {
					t.Fatal(err)
				}
				eps = append(eps, map[string]any{"endpoint": map[string]any{"address": map[string]any{
					"socket_address": map[string]any{"address": e.Host, "port_value": e.Port}}}})
			}
			cl["type"] = "STATIC"
			setPath(t, cl, eps, "load_assignment", "endpoints", 0, "lb_endpoints")
		case "condisagg":
			if host := getPath(t, cl, "load_assignment", "endpoints", 0, "lb_endpoints", 0, "endpoint", "address", "socket_address", "address"); host != chartPodsHost {
				t.Fatalf("chart's ext_proc cluster resolves %v; want %s", host, chartPodsHost)
			}
			setPath(t, cl, map[string]any{
				"name": "envoy.network.dns_resolver.cares",
				"typed_config": map[string]any{
					"@type":                "type.googleapis.com/envoy.extensions.network.dns_resolver.cares.v3.CaresDnsResolverConfig",
					"resolvers":            []any{map[string]any{"socket_address": map[string]any{"address": resolver.Addr().String(), "port_value": int(resolver.Port())}}},
					"dns_resolver_options": map[string]any{"no_default_search_domain": true},
				},
			}, "cluster_type", "typed_config", "typed_dns_resolver_config")
		}
	}
	rendered, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "bootstrap.yaml")
	if err := os.WriteFile(path, rendered, 0o644); err != nil {
		t.Fatal(err)
	}
	bin, err := envoy.FindBinary()
	if err != nil {
		t.Fatal(err)
	}
	startCtx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	env, err := envoy.Start(startCtx, bin, path, envoy.StartOptions{StopTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Logf("envoy stop: %v", err)
		}
		if t.Failed() {
			t.Logf("envoy output:\n%s", env.Output())
		}
	})
	return env
}

// getPath walks a decoded YAML document by map keys and slice indices.
func getPath(t *testing.T, v any, path ...any) any {
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
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				t.Fatalf("path %v: element %d is not a list with index %d", path, i, k)
			}
			v = l[k]
		}
	}
	return v
}

// setPath sets the last key of path (a map key) in the map getPath finds before it.
func setPath(t *testing.T, doc any, value any, path ...any) {
	t.Helper()
	m, ok := getPath(t, doc, path[:len(path)-1]...).(map[string]any)
	if !ok {
		t.Fatalf("path %v: parent is not a map", path)
	}
	m[path[len(path)-1].(string)] = value
}

// testDNS answers A queries for one name with a set of addresses (TTL 1 s), AAAA queries for
// it with none, and any other name with NXDOMAIN: the cluster DNS of a headless Service.
type testDNS struct {
	conn    net.PacketConn
	name    string // lower case, with the final dot
	addrs   []netip.Addr
	queries atomic.Int64 // queries for name answered
	wg      sync.WaitGroup
}

func startTestDNS(t *testing.T, name string, addrs []netip.Addr) *testDNS {
	t.Helper()
	conn, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &testDNS{conn: conn, name: strings.ToLower(name) + ".", addrs: addrs}
	d.wg.Go(d.serve)
	t.Cleanup(func() { conn.Close(); d.wg.Wait() })
	return d
}

func (d *testDNS) addr() netip.AddrPort { return d.conn.LocalAddr().(*net.UDPAddr).AddrPort() }

func (d *testDNS) serve() {
	buf := make([]byte, 1500) // one datagram; a longer query is cut and answered FORMERR
	for {
		n, from, err := d.conn.ReadFrom(buf)
		if err != nil {
			return // closed
		}
		if resp, ok := d.answer(buf[:n]); ok {
			_, _ = d.conn.WriteTo(resp, from)
		}
	}
}

// answer builds the response to one query; false: not a query worth answering.
func (d *testDNS) answer(query []byte) ([]byte, bool) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil || h.Response {
		return nil, false
	}
	q, err := p.Question()
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired}
	if err != nil {
		rh.RCode = dnsmessage.RCodeFormatError
		b := dnsmessage.NewBuilder(nil, rh)
		out, err := b.Finish()
		return out, err == nil
	}
	ours := strings.ToLower(q.Name.String()) == d.name
	if !ours {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, rh)
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, false
	}
	if err := b.Question(q); err != nil {
		return nil, false
	}
	if err := b.StartAnswers(); err != nil {
		return nil, false
	}
	if ours && q.Type == dnsmessage.TypeA {
		d.queries.Add(1)
		for _, a := range d.addrs {
			rr := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 1}
			if err := b.AResource(rr, dnsmessage.AResource{A: a.As4()}); err != nil {
				return nil, false
			}
		}
	}
	out, err := b.Finish()
	return out, err == nil
}
