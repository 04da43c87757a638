package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	condisaggv1 "github.com/condisagg/condisagg/proto/condisagg/v1"
)

// syncBuffer is a log sink safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

const serveYAML = `listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
admin_grpc_listen: 127.0.0.1:0
drain_timeout: 5s
pool: {health_interval: -1s} # the workers below are addresses nobody serves
model: {tokenizer: MODEL, block_size: 16}
router:
  mode: kv
  kv_events: false
  conditional_disagg: false
`

// TestServeEndToEnd starts `condisagg serve` in-process on loopback with a config file and
// drives it with the explain and workers clients, the admin HTTP endpoints and a reload.
func TestServeEndToEnd(t *testing.T) {
	model := requireModel(t)
	dir := t.TempDir()
	cfgPath := writeFile(t, dir, "condisagg.yaml", strings.Replace(serveYAML, "MODEL", model, 1)+workersYAML)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrs := make(chan listenAddrs, 1)
	logs := &syncBuffer{}
	exit := make(chan int, 1)
	go func() {
		exit <- runServe(ctx, []string{"--config", cfgPath}, logs, serveHooks{listening: func(a listenAddrs) { addrs <- a }})
	}()
	var grpcAddr, adminAddr, httpAddr string
	select {
	case a := <-addrs:
		grpcAddr, adminAddr, httpAddr = a.grpc, a.adminGRPC, a.http
	case code := <-exit:
		t.Fatalf("serve exited %d:\n%s", code, logs.String())
	}
	body := `{"model":"qwen3","messages":[{"role":"user","content":"hello"}]}`

	var out, errOut bytes.Buffer
	if code := run(ctx, []string{"explain", "--addr", adminAddr, "--body", body}, &out, &errOut); code != 0 {
		t.Fatalf("explain exit %d: %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), "reason") || !strings.Contains(out.String(), "remote_disabled") {
		t.Fatalf("explain table:\n%s", out.String())
	}
	out.Reset()
	bodyFile := writeFile(t, dir, "req.json", body)
	if code := run(ctx, []string{"explain", "--addr", adminAddr, "--body", "@" + bodyFile, "-o", "json"}, &out, &errOut); code != 0 {
		t.Fatalf("explain json exit %d: %s", code, errOut.String())
	}
	var ex struct{ Route, Reason, Destination string }
	if err := json.Unmarshal(out.Bytes(), &ex); err != nil || ex.Route != "prefill" || ex.Destination != "127.0.0.1:8100" {
		t.Fatalf("explain json %+v %v:\n%s", ex, err, out.String())
	}
	out.Reset()
	if code := run(ctx, []string{"workers", "--addr", adminAddr}, &out, &errOut); code != 0 ||
		!strings.Contains(out.String(), "decode-0") || !strings.Contains(out.String(), "127.0.0.1:8200") {
		t.Fatalf("workers exit %d:\n%s%s", code, out.String(), errOut.String())
	}

	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + httpAddr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Fatalf("/healthz %d", code)
	}
	if code, text := get("/readyz"); code != 200 {
		t.Fatalf("/readyz %d %s", code, text)
	}
	if _, text := get("/metrics"); !strings.Contains(text, "condisagg_extproc_active_streams") {
		t.Fatal("/metrics lacks the extproc metrics")
	}
	resp, err := http.Post("http://"+httpAddr+"/debug/explain?path=/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"remote_disabled"`) {
		t.Fatalf("/debug/explain %d %s", resp.StatusCode, b)
	}

	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	extProcDecision(t, conn, body)

	if _, err := condisaggv1.NewAdminClient(conn).ListWorkers(ctx, &condisaggv1.ListWorkersRequest{}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("Admin answered on the ext_proc port: %v", err)
	}
	aconn, err := grpc.NewClient(adminAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer aconn.Close()

	// A bad file is rejected and the old configuration stays; a good one is applied.
	admin := condisaggv1.NewAdminClient(aconn)
	good := strings.Replace(serveYAML, "MODEL", model, 1)
	bad := strings.Replace(good, "conditional_disagg: false", "conditional_disagg: true\n  kv_events: true\n  conditional_disagg_config: {eff_isl_ratio_threshold: 1.5}", 1)
	bad = strings.Replace(bad, "  kv_events: false\n", "", 1)
	if err := os.WriteFile(cfgPath, []byte(bad+workersYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	rr, err := admin.ReloadConfig(ctx, &condisaggv1.ReloadConfigRequest{})
	if err != nil || rr.Applied || !strings.Contains(rr.Message, "eff_isl_ratio_threshold: 1.5 is outside [0.0, 1.0]") {
		t.Fatalf("bad reload: %v %v", rr, err)
	}
	er, err := admin.Explain(ctx, &condisaggv1.ExplainRequest{Path: "/v1/chat/completions", Body: []byte(body)})
	if err != nil || er.Reason != "remote_disabled" {
		t.Fatalf("after a rejected reload: %v %v", er, err)
	}
	enabled := strings.Replace(bad, "1.5", "0.9", 1)
	if err := os.WriteFile(cfgPath, []byte(enabled+workersYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	if rr, err := admin.ReloadConfig(ctx, &condisaggv1.ReloadConfigRequest{}); err != nil || !rr.Applied {
		t.Fatalf("good reload: %v %v", rr, err)
	}
	er, err = admin.Explain(ctx, &condisaggv1.ExplainRequest{Path: "/v1/chat/completions", Body: []byte(body)})
	if err != nil || er.Reason == "remote_disabled" || er.Inputs.RatioThreshold != 0.9 {
		t.Fatalf("after a good reload: %v %v", er, err)
	}

	cancel()
	if code := <-exit; code != 0 {
		t.Fatalf("serve exit %d:\n%s", code, logs.String())
	}
}

// TestServeRejectsBadConfig: startup validation fails with exit 2 and the messages.
func TestServeRejectsBadConfig(t *testing.T) {
	var errOut bytes.Buffer
	code := run(context.Background(), []string{"serve", "--failure-mode", "maybe"}, io.Discard, &errOut)
	if code != 2 || !strings.Contains(errOut.String(), `failure_mode: "maybe" must be one of open, closed`) ||
		!strings.Contains(errOut.String(), "model.tokenizer") {
		t.Fatalf("exit %d:\n%s", code, errOut.String())
	}
}

// startServe runs serve with the given YAML until the test ends and returns its addresses.
func startServe(t *testing.T, yamlText string) listenAddrs {
	t.Helper()
	cfgPath := writeFile(t, t.TempDir(), "condisagg.yaml", yamlText)
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan listenAddrs, 1)
	exit := make(chan int, 1)
	logs := &syncBuffer{}
	go func() {
		exit <- runServe(ctx, []string{"--config", cfgPath}, logs, serveHooks{listening: func(a listenAddrs) { addrs <- a }})
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-exit; code != 0 {
			t.Errorf("serve exit %d:\n%s", code, logs.String())
		}
	})
	select {
	case a := <-addrs:
		return a
	case code := <-exit:
		exit <- code // for the cleanup, which waits for it
		t.Fatalf("serve exited %d:\n%s", code, logs.String())
	}
	return listenAddrs{}
}

// TestServeWithEventStreams: with router.kv_events every worker's ZMQ stream is started; a
// stream that has not connected yet does not make the router unready (the worker is healthy,
// it only gets no cache credit), /readyz names it, and ListWorkers shows the stream down.
func TestServeWithEventStreams(t *testing.T) {
	model := requireModel(t)
	cfg := strings.Replace(serveYAML, "MODEL", model, 1)
	cfg = strings.Replace(cfg, "kv_events: false", "kv_events: true", 1) + `workers:
  - {name: decode-0, role: decode, endpoint: 127.0.0.1:8200, kv_events: "tcp://127.0.0.1:1", num_gpu_blocks: 100}
`
	a := startServe(t, cfg)
	adminAddr, httpAddr := a.adminGRPC, a.http
	// Ready from the first moment the port is open: Envoy's first health check must not find
	// NOT_SERVING (it would not ask again for its whole interval).
	conn, err := grpc.NewClient(a.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, name := range []string{"", "envoy.service.ext_proc.v3.ExternalProcessor"} {
		hr, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: name})
		if err != nil || hr.Status != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health %q at startup: %v %v", name, hr, err)
		}
	}
	resp, err := http.Get("http://" + httpAddr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), "decode-0 decode healthy (no KV event yet: no cache credit)") {
		t.Fatalf("/readyz %d %s", resp.StatusCode, b)
	}
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"workers", "--addr", adminAddr, "-o", "json"}, &out, &errOut); code != 0 {
		t.Fatalf("workers: %s", errOut.String())
	}
	var lw struct {
		Workers []struct {
			ID     string `json:"id"`
			Events *struct {
				Connected bool `json:"connected"`
			} `json:"events"`
		} `json:"workers"`
	}
	if err := json.Unmarshal(out.Bytes(), &lw); err != nil || len(lw.Workers) != 1 || lw.Workers[0].Events == nil || lw.Workers[0].Events.Connected {
		t.Fatalf("workers json %v:\n%s", err, out.String())
	}
}

// extProcDecision plays Envoy for one BUFFERED request on the binary's gRPC port.
func extProcDecision(t *testing.T, conn *grpc.ClientConn, body string) {
	t.Helper()
	set := decideHeaders(t, conn, body)
	if set["x-condisagg-route"] != "prefill" || set["x-gateway-destination-endpoint"] != "127.0.0.1:8100" ||
		set["x-condisagg-decode-host"] != "127.0.0.1:8200" {
		t.Fatalf("ext_proc decision over TCP: %v", set)
	}
}

// TestAdminOffLoopbackNeedsAuth: an admin listener on a routable address without a token or
// mTLS is a startup error naming the field and the fix; a token file makes it valid, and then
// both the Admin gRPC service and /debug/explain demand the token.
func TestAdminOffLoopbackNeedsAuth(t *testing.T) {
	model := requireModel(t)
	dir := t.TempDir()
	base := strings.Replace(serveYAML, "MODEL", model, 1) + workersYAML
	open := strings.Replace(base, "admin_grpc_listen: 127.0.0.1:0", "admin_grpc_listen: 0.0.0.0:0", 1)
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"serve", "--config", writeFile(t, dir, "open.yaml", open)}, &out, &errOut); code != 2 ||
		!strings.Contains(errOut.String(), "admin_grpc_listen: 0.0.0.0:0 is not a loopback address: set admin_token_file") {
		t.Fatalf("open admin listener: exit %d\n%s", code, errOut.String())
	}
	short := writeFile(t, dir, "short.token", "abc\n")
	errOut.Reset()
	if code := run(context.Background(), []string{"serve", "--config", writeFile(t, dir, "short.yaml", base), "--admin-token-file", short}, &out, &errOut); code != 2 ||
		!strings.Contains(errOut.String(), "must hold one token of at least 16 characters") {
		t.Fatalf("short token: exit %d\n%s", code, errOut.String())
	}
	tokenFile := writeFile(t, dir, "admin.token", "0123456789abcdef-admin\n")
	a := startServe(t, open+"admin_token_file: "+tokenFile+"\n")
	_, port, _ := net.SplitHostPort(a.adminGRPC)
	addr := "127.0.0.1:" + port
	out.Reset()
	errOut.Reset()
	if code := run(context.Background(), []string{"workers", "--addr", addr}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "Unauthenticated") {
		t.Fatalf("workers without the token: exit %d %s", code, errOut.String())
	}
	if code := run(context.Background(), []string{"workers", "--addr", addr, "--token-file", tokenFile}, &out, &errOut); code != 0 {
		t.Fatalf("workers with the token: exit %d %s", code, errOut.String())
	}
	body := `{"model":"qwen3","messages":[{"role":"user","content":"hello"}]}`
	for _, c := range []struct {
		auth string
		want int
	}{{"", 401}, {"Bearer nope", 401}, {"Bearer 0123456789abcdef-admin", 200}} {
		req, _ := http.NewRequest("POST", "http://"+a.http+"/debug/explain", strings.NewReader(body))
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Fatalf("/debug/explain with %q: %d, want %d", c.auth, resp.StatusCode, c.want)
		}
	}
}

// TestServeExitsWhenExtProcDies: an ext_proc server that stops on its own ends serve with exit
// code 1 (a supervisor then restarts the router) instead of leaving a process without its port.
func TestServeExitsWhenExtProcDies(t *testing.T) {
	model := requireModel(t)
	cfgPath := writeFile(t, t.TempDir(), "c.yaml", strings.Replace(serveYAML, "MODEL", model, 1)+workersYAML)
	servers := make(chan *grpc.Server, 1)
	addrs := make(chan listenAddrs, 1)
	exit := make(chan int, 1)
	logs := &syncBuffer{}
	go func() {
		exit <- runServe(context.Background(), []string{"--config", cfgPath}, logs, serveHooks{
			extProc:   func(g *grpc.Server) { servers <- g },
			listening: func(a listenAddrs) { addrs <- a },
		})
	}()
	g := <-servers
	<-addrs
	g.Stop()
	select {
	case code := <-exit:
		if code != 1 || !strings.Contains(logs.String(), `"err":"ext_proc gRPC server: `) {
			t.Fatalf("exit %d after the ext_proc server died:\n%s", code, logs.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("serve kept running without its ext_proc server:\n%s", logs.String())
	}
}
