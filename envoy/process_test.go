package envoy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaked := leakedGoroutines(); leaked != "" {
			fmt.Fprintf(os.Stderr, "leaked goroutines:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

// leakedGoroutines returns the stacks of goroutines still running code of this package (the
// Envoy waiter of Start, the test ext_proc handler), waiting briefly for ones that are exiting.
func leakedGoroutines() string {
	deadline := time.Now().Add(2 * time.Second)
	for {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var leaked []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "condisagg/envoy.Start") || strings.Contains(g, "condisagg/envoy.(*testProcessor)") {
				leaked = append(leaked, g)
			}
		}
		if len(leaked) == 0 || time.Now().After(deadline) {
			return strings.Join(leaked, "\n\n")
		}
		runtime.Gosched()
	}
}

// upstream is a loopback HTTP server standing in for a worker; it records what reached it.
type upstream struct {
	name string
	srv  *httptest.Server
	hits atomic.Int64
	reqs chan seenRequest // buffered; one entry per request
}

type seenRequest struct {
	method, path string
	bodySHA      [32]byte
	header       http.Header
}

func newUpstream(t *testing.T, name string) *upstream {
	t.Helper()
	u := &upstream{name: name, reqs: make(chan seenRequest, 64)}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" { // Envoy's active health check of decode_fallback
			return
		}
		u.hits.Add(1)
		body, _ := io.ReadAll(r.Body)
		select {
		case u.reqs <- seenRequest{r.Method, r.URL.Path, sha256.Sum256(body), r.Header.Clone()}:
		default:
		}
		// Three flushed chunks, as a streamed completion would arrive.
		w.Header().Set("content-type", "text/event-stream")
		for i := range 3 {
			fmt.Fprintf(w, "data: {\"served_by\":%q,\"chunk\":%d}\n\n", name, i)
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstream) endpoint(t *testing.T) Endpoint {
	t.Helper()
	e, err := ParseEndpoint(u.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// testProcessor plays condisagg's side of ext_proc in its simplest form: it answers every message
// and puts its decision (route + destination) where the BUFFERED flow expects it: the headers
// response of a bodyless request, else the body response (envoy-extproc §1).
type testProcessor struct {
	extprocv3.UnimplementedExternalProcessorServer
	decide  func(path string) (route, dest string)
	headers chan map[string]string // request headers as ext_proc saw them, one map per stream
}

func (p *testProcessor) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	var path string
	for {
		req, err := stream.Recv()
		if err != nil {
			return nil // io.EOF or cancel: the stream is over
		}
		var resp *extprocv3.ProcessingResponse
		switch r := req.Request.(type) {
		case *extprocv3.ProcessingRequest_RequestHeaders:
			hs := map[string]string{}
			for _, h := range r.RequestHeaders.GetHeaders().GetHeaders() {
				hs[h.Key] = string(h.RawValue) + h.Value
			}
			path = hs[":path"]
			select {
			case p.headers <- hs:
			default:
			}
			common := &extprocv3.CommonResponse{}
			if r.RequestHeaders.EndOfStream {
				common = p.decision(path)
			}
			resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{
				RequestHeaders: &extprocv3.HeadersResponse{Response: common}}}
		case *extprocv3.ProcessingRequest_RequestBody:
			resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
				RequestBody: &extprocv3.BodyResponse{Response: p.decision(path)}}}
		case *extprocv3.ProcessingRequest_ResponseHeaders:
			resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
				ResponseHeaders: &extprocv3.HeadersResponse{}}}
		case *extprocv3.ProcessingRequest_ResponseBody:
			resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
				ResponseBody: &extprocv3.BodyResponse{}}}
		default:
			return fmt.Errorf("test processor: unexpected message %T", r)
		}
		if err := stream.Send(resp); err != nil {
			return nil
		}
	}
}

func (p *testProcessor) decision(path string) *extprocv3.CommonResponse {
	route, dest := p.decide(path)
	set := func(k, v string) *corev3.HeaderValueOption {
		return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, RawValue: []byte(v)}}
	}
	return &extprocv3.CommonResponse{
		HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
			set("x-condisagg-route", route), set("x-gateway-destination-endpoint", dest)}},
		ClearRouteCache: true,
	}
}

// startProcessor serves p on 127.0.0.1 with the gRPC health service Envoy's health check asks.
func startProcessor(t *testing.T, p *testProcessor) Endpoint {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	extprocv3.RegisterExternalProcessorServer(srv, p)
	hs := health.NewServer()
	hs.SetServingStatus("envoy.service.ext_proc.v3.ExternalProcessor", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	e, err := ParseEndpoint(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// deadEndpoint returns a loopback address nothing listens on (a port just released).
func deadEndpoint(t *testing.T) Endpoint {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e, err := ParseEndpoint(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	lis.Close()
	return e
}

// startEnvoy renders p, starts the real Envoy on it and stops it when the test ends.
func startEnvoy(t *testing.T, p Params) *Process {
	t.Helper()
	bin := envoyBin(t)
	path, err := WriteBootstrap(t.TempDir(), p)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	proc, err := Start(ctx, bin, path, StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := proc.Stop(); err != nil {
			t.Errorf("stop envoy: %v\n%s", err, proc.Output())
		}
	})
	return proc
}

// forged are router headers a client might send to pick a host (all must be stripped).
func forged(canary string) map[string]string {
	return map[string]string{
		"x-condisagg-route":              "prefill",
		"X-Condisagg-Decode-Host":        canary,
		"x-condisagg-prefill-host":       canary,
		"x-gateway-destination-endpoint": canary,
		"x-prefiller-host-port":          canary,
		"x-bypass-remote-prefill":        "true",
	}
}

type result struct {
	status int
	body   string
	header http.Header
}

func send(t *testing.T, proc *Process, method, path string, body []byte, headers map[string]string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "http://"+proc.ListenerAddr("llm")+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body == nil {
		req.Body = nil
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s through Envoy: %v\nenvoy output:\n%s", method, path, err, proc.Output())
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return result{resp.StatusCode, string(b), resp.Header}
}

func expectServed(t *testing.T, u *upstream, method, path string, body []byte) seenRequest {
	t.Helper()
	select {
	case r := <-u.reqs:
		if r.method != method || r.path != path || r.bodySHA != sha256.Sum256(body) {
			t.Errorf("%s got %s %s (body sha %x); want %s %s with the client's body", u.name, r.method, r.path, r.bodySHA[:4], method, path)
		}
		return r
	default:
		t.Fatalf("%s received no request; want %s %s", u.name, method, path)
		return seenRequest{}
	}
}

func chatBody(n int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"model":"m","stream":true,"messages":[{"role":"user","content":"`)
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "word%d ", i)
	}
	b.WriteString(`"}]}`)
	return b.Bytes()
}

// TestEnvoyRoutesOnExtProcDecision runs the real Envoy with the recommended profile (BUFFERED
// request, STREAMED response, fail-open) in front of a minimal ext_proc server: the decision
// headers select the prefill or decode cluster and the exact upstream address, the body arrives
// unchanged, the streamed answer comes back whole, and forged client headers never reach
// ext_proc, the upstream, or the canary they point at.
func TestEnvoyRoutesOnExtProcDecision(t *testing.T) {
	t.Parallel()
	decode, prefill := newUpstream(t, "decode"), newUpstream(t, "prefill")
	fallback, canary := newUpstream(t, "fallback"), newUpstream(t, "canary")
	proc := &testProcessor{headers: make(chan map[string]string, 16), decide: func(path string) (string, string) {
		if path == "/v1/completions" {
			return "prefill", prefill.srv.Listener.Addr().String()
		}
		return "decode", decode.srv.Listener.Addr().String()
	}}
	p := testParams(Buffered, FailOpen)
	p.ExtProc = startProcessor(t, proc)
	p.DecodeFallback = []Endpoint{fallback.endpoint(t)}
	env := startEnvoy(t, p)
	canaryAddr := canary.srv.Listener.Addr().String()

	for _, c := range []struct {
		method, path string
		body         []byte
		want         *upstream
		route        string
	}{
		{http.MethodPost, "/v1/chat/completions", chatBody(200 << 10), decode, "decode"},
		{http.MethodPost, "/v1/completions", []byte(`{"model":"m","prompt":"hello"}`), prefill, "prefill"},
		{http.MethodGet, "/v1/models", nil, decode, "decode"},
	} {
		t.Run(c.method+c.path, func(t *testing.T) {
			res := send(t, env, c.method, c.path, c.body, forged(canaryAddr))
			if res.status != http.StatusOK || strings.Count(res.body, `"served_by":"`+c.want.name+`"`) != 3 {
				t.Fatalf("status %d body %q; want 200 with three chunks from %s", res.status, res.body, c.want.name)
			}
			seen := expectServed(t, c.want, c.method, c.path, c.body)
			if got := seen.header.Get("x-condisagg-route"); got != c.route {
				t.Errorf("upstream saw x-condisagg-route %q; want %q", got, c.route)
			}
			if got, want := seen.header.Get("x-gateway-destination-endpoint"), c.want.srv.Listener.Addr().String(); got != want {
				t.Errorf("upstream saw x-gateway-destination-endpoint %q; want %q", got, want)
			}
			for _, h := range []string{"x-condisagg-decode-host", "x-condisagg-prefill-host", "x-prefiller-host-port", "x-bypass-remote-prefill"} {
				if v := seen.header.Get(h); v != "" {
					t.Errorf("forged %s: %q reached the upstream", h, v)
				}
			}
			hs := <-proc.headers
			for h := range forged("") {
				if v, ok := hs[strings.ToLower(h)]; ok {
					t.Errorf("forged %s: %q reached ext_proc (header_mutation must strip it first)", h, v)
				}
			}
		})
	}
	if n := canary.hits.Load() + fallback.hits.Load(); n != 0 {
		t.Errorf("canary/fallback received %d requests; want 0", n)
	}
	expectStats(t, env, map[string]uint64{
		"cluster.decode.original_dst_host_invalid":    0,
		"cluster.prefill.original_dst_host_invalid":   0,
		"http.llm.ext_proc.streams_failed":            0,
		"http.llm.ext_proc.spurious_msgs_received":    0,
		"http.llm.ext_proc.clear_route_cache_ignored": 0,
		"http.llm.ext_proc.streams_closed":            3,
	})
}

func expectStats(t *testing.T, env *Process, want map[string]uint64) {
	t.Helper()
	for stat, w := range want {
		if v, err := env.Counter(context.Background(), stat); err != nil || v != w {
			t.Errorf("stat %s = %d, %v; want %d", stat, v, err, w)
		}
	}
}

// TestEnvoyFailureModes runs the real Envoy with condisagg unreachable (envoy-extproc §4):
// fail-open serves through decode_fallback, fail-closed answers 500, and forged destination
// headers reach neither the canary nor any upstream in both cases.
func TestEnvoyFailureModes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name       string
		p          Params
		wantStatus int
		served     bool
	}{
		{"buffered_fail_open", testParams(Buffered, FailOpen), http.StatusOK, true},
		{"full_duplex_fail_closed", testParams(FullDuplex, FailClosed), http.StatusInternalServerError, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			fallback, canary := newUpstream(t, "fallback"), newUpstream(t, "canary")
			c.p.ExtProc = deadEndpoint(t)
			if c.p.FailOpen {
				c.p.DecodeFallback = []Endpoint{fallback.endpoint(t)}
			}
			env := startEnvoy(t, c.p)
			body := chatBody(4 << 10)
			res := send(t, env, http.MethodPost, "/v1/chat/completions", body, forged(canary.srv.Listener.Addr().String()))
			if res.status != c.wantStatus {
				t.Fatalf("status %d body %q; want %d", res.status, res.body, c.wantStatus)
			}
			if c.served {
				seen := expectServed(t, fallback, http.MethodPost, "/v1/chat/completions", body)
				for h := range forged("") {
					if v := seen.header.Get(h); v != "" {
						t.Errorf("forged %s: %q reached the fallback upstream", h, v)
					}
				}
				expectStats(t, env, map[string]uint64{"http.llm.ext_proc.failure_mode_allowed": 1})
			} else if n := fallback.hits.Load(); n != 0 {
				t.Errorf("fallback received %d requests; want 0", n)
			}
			if n := canary.hits.Load(); n != 0 {
				t.Errorf("canary received %d requests; want 0", n)
			}
		})
	}
}

// TestStartReportsEnvoyFailure: a bootstrap Envoy rejects makes Start fail with Envoy's message
// instead of waiting for readiness, and leaves no process behind.
func TestStartReportsEnvoyFailure(t *testing.T) {
	t.Parallel()
	bin := envoyBin(t)
	path := t.TempDir() + "/bad.yaml"
	if err := os.WriteFile(path, []byte("static_resources: {listeners: [{name: x, nonsense: 1}]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	proc, err := Start(ctx, bin, path, StartOptions{})
	if err == nil {
		proc.Stop()
		t.Fatal("Start succeeded on an invalid bootstrap")
	}
	if !strings.Contains(err.Error(), "nonsense") || !strings.Contains(err.Error(), "exited before it was ready") {
		t.Errorf("Start error = %v; want Envoy's complaint about the unknown field", err)
	}
}

func TestTailBufferKeepsTheEnd(t *testing.T) {
	tb := &tailBuffer{max: 8}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fmt.Fprint(tb, "0123456789")
		}()
	}
	wg.Wait()
	if got := tb.String(); got != "23456789" {
		t.Errorf("tail = %q; want the last 8 bytes %q", got, "23456789")
	}
}
