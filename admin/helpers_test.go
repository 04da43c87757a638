package admin

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/condisagg/condisagg/decisionlog"
	"github.com/condisagg/condisagg/extproc"
	"github.com/condisagg/condisagg/internal/leakcheck"
	"github.com/condisagg/condisagg/internal/repo"
	"github.com/condisagg/condisagg/kvindex"
	"github.com/condisagg/condisagg/policy"
	"github.com/condisagg/condisagg/pool"
	condisaggv1 "github.com/condisagg/condisagg/proto/condisagg/v1"
	"github.com/condisagg/condisagg/route"
	"github.com/condisagg/condisagg/tokenizer"
)

func TestMain(m *testing.M) { leakcheck.Main(m, "condisagg/admin.", "condisagg/extproc.") }

// qwen3 loads the Qwen3 tokenizer once per test binary: a load takes seconds under -race.
var qwen3 = sync.OnceValues(func() (*tokenizer.Tokenizer, error) {
	dir, err := repo.Model("qwen3")
	if err != nil {
		return nil, err
	}
	return tokenizer.Load(dir, tokenizer.Options{})
})

const (
	chatPath = "/v1/chat/completions"
	d0Addr   = "10.0.0.21:8000" // decode-0's endpoint
)

// fleet is the test fleet: two decode workers and a prefill worker.
var fleet = [...]pool.WorkerConfig{
	{Name: "decode-0", Role: pool.RoleDecode, Endpoint: d0Addr, NumGPUBlocks: 40000},
	{Name: "decode-1", Role: pool.RoleDecode, Endpoint: "10.0.0.22:8000", NumGPUBlocks: 40000},
	{Name: "prefill-0", Role: pool.RolePrefill, Endpoint: "10.0.0.11:8000", MaxNumBatchedTokens: 8192},
}

// env is the pipeline the Admin service reports on: a real router (the Qwen3 tokenizer, an
// index, a pool, kv-aware conditional disaggregation) and the ext_proc server that routes with
// it and logs its decisions, served on loopback for a client that plays Envoy.
type env struct {
	t       *testing.T
	tok     *tokenizer.Tokenizer
	index   *kvindex.Index
	pool    *pool.Pool
	router  *route.Router
	server  *extproc.Server
	extConn *grpc.ClientConn // the ext_proc port
	hash    uint64           // the last engine block hash cacheOn stored
}

func newEnv(t *testing.T, workers ...pool.WorkerConfig) *env {
	t.Helper()
	if len(workers) == 0 {
		workers = fleet[:]
	}
	e := &env{t: t}
	var err error
	if e.tok, err = qwen3(); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if e.pool, err = pool.New(pool.Config{Workers: workers, BlockSize: 16}, pool.Options{Metrics: pool.NewMetrics(reg)}); err != nil {
		t.Fatal(err)
	}
	if e.index, err = kvindex.New(kvindex.Config{BlockSize: 16}); err != nil {
		t.Fatal(err)
	}
	pc := policy.DefaultConfig()
	pc.Enabled, pc.RouterMode, pc.KVEvents, pc.DistinctPools = true, "kv", true, true
	// Session affinity on: requests without a session id are untouched.
	if e.router, err = route.New(route.Options{Tokenizer: e.tok, Index: e.index, Pool: e.pool, Policy: &pc,
		Sessions: route.SessionConfig{Enabled: true}}); err != nil {
		t.Fatal(err)
	}
	log, err := decisionlog.NewRecent(decisionlog.RecentOptions{})
	if err != nil {
		t.Fatal(err)
	}
	set := &extproc.Settings{Policy: &pc, MaxBodyBytes: extproc.DefaultMaxBodyBytes, FailureMode: extproc.FailClosed}
	if e.server, err = extproc.NewServer(extproc.ServerOptions{Router: e.router, Settings: set,
		Metrics: extproc.NewMetrics(reg), Recent: log}); err != nil {
		t.Fatal(err)
	}
	e.extConn = e.serveExtProc()
	return e
}

// serveExtProc runs the ext_proc server on 127.0.0.1:0 until the test ends, and dials it.
func (e *env) serveExtProc() *grpc.ClientConn {
	e.t.Helper()
	g, hs := extproc.NewGRPCServer(e.server, extproc.GRPCOptions{MaxBodyBytes: extproc.DefaultMaxBodyBytes})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- extproc.Serve(ctx, g, hs, lis, 0, time.Second) }()
	e.t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			e.t.Errorf("ext_proc server: %v", err)
		}
		e.server.Wait()
	})
	return dial(e.t, lis.Addr().String())
}

// dial is a plaintext client connection to addr, closed with the test.
func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// startAdmin runs the Admin service over e on its own gRPC server (127.0.0.1:0), as serve
// does, and returns a client of it.
func startAdmin(t *testing.T, e *env, opts ServerOptions) condisaggv1.AdminClient {
	t.Helper()
	svc, err := New(Options{Router: e.router, Reload: func(context.Context) error { return nil }, Server: e.server})
	if err != nil {
		t.Fatal(err)
	}
	g := NewServer(svc, opts)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { defer close(served); _ = g.Serve(lis) }()
	t.Cleanup(func() { g.Stop(); <-served })
	return condisaggv1.NewAdminClient(dial(t, lis.Addr().String()))
}

// cacheOn stores body's whole blocks in worker's index, as its engine's KV events would, under
// fresh engine hashes.
func (e *env) cacheOn(worker string, body []byte) {
	e.t.Helper()
	toks, err := e.tok.EncodeChat(nil, body, tokenizer.ChatOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	n := len(toks) / 16
	hashes := make([]uint64, n)
	for i := range hashes {
		e.hash++
		hashes[i] = e.hash
	}
	st := &kvindex.Store{Medium: kvindex.GPU, Hashes: hashes, Tokens: toks[:n*16], BlockSize: 16, PlainBlocks: n}
	if res := e.index.Store(kvindex.WorkerID(worker), st); res.Skip != kvindex.SkipNone || res.Stored != n {
		e.t.Fatalf("store on %s: %+v", worker, res)
	}
}

// booked reports whether any worker holds a booking (a request, prefill tokens).
func (e *env) booked() bool {
	return slices.ContainsFunc(e.pool.Workers(), func(w pool.WorkerInfo) bool {
		return w.ActiveRequests > 0 || w.ActivePrefillTokens > 0
	})
}

// chatBody is a chat request for the model with one user message.
func chatBody(text string, stream bool) []byte {
	type message struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	b, err := json.Marshal(struct {
		Model    string    `json:"model"`
		Messages []message `json:"messages"`
		Stream   bool      `json:"stream,omitempty"`
	}{"qwen3", []message{{"user", text}}, stream})
	if err != nil {
		panic(err) // strings always encode
	}
	return b
}

// envoyStream plays Envoy's side of one ext_proc stream: BUFFERED request bodies, STREAMED
// response bodies. Each message it sends gets exactly one answer.
type envoyStream struct {
	t      *testing.T
	stream extprocv3.ExternalProcessor_ProcessClient
	sent   int
}

func (e *env) open() *envoyStream {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	e.t.Cleanup(cancel)
	s, err := extprocv3.NewExternalProcessorClient(e.extConn).Process(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	return &envoyStream{t: e.t, stream: s}
}

// step sends one message (the first with the protocol config) and returns the answer.
func (v *envoyStream) step(req *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse {
	v.t.Helper()
	if v.sent == 0 {
		req.ProtocolConfig = &extprocv3.ProtocolConfiguration{RequestBodyMode: filterv3.ProcessingMode_BUFFERED,
			ResponseBodyMode: filterv3.ProcessingMode_STREAMED}
	}
	v.sent++
	if err := v.stream.Send(req); err != nil {
		v.t.Fatalf("send: %v", err)
	}
	r, err := v.stream.Recv()
	if err != nil {
		v.t.Fatalf("recv: %v", err)
	}
	return r
}

// headerMap holds the name/value pairs kv, values in raw_value as Envoy sends them.
func headerMap(kv ...string) *corev3.HeaderMap {
	m := &corev3.HeaderMap{}
	for i := 0; i+1 < len(kv); i += 2 {
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return m
}

// decide sends a chat request's headers (x-request-id req-1) and its whole body, and returns
// the route the decision set.
func (v *envoyStream) decide(body []byte) string {
	v.t.Helper()
	v.step(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		Headers: headerMap(":method", "POST", ":path", chatPath, "x-request-id", "req-1")}}})
	r := v.step(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{
		Body: body, EndOfStream: true}}})
	for _, h := range r.GetRequestBody().GetResponse().GetHeaderMutation().GetSetHeaders() {
		if h.GetHeader().GetKey() == extproc.HeaderRoute {
			return string(h.GetHeader().GetRawValue())
		}
	}
	return ""
}

// bodyless sends the headers of a request without a body (a passthrough).
func (v *envoyStream) bodyless(kv ...string) {
	v.t.Helper()
	v.step(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		Headers: headerMap(kv...), EndOfStream: true}}})
}

// answer sends the upstream's response: its headers, then the whole body.
func (v *envoyStream) answer(body string, headers ...string) {
	v.t.Helper()
	v.step(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
		Headers: headerMap(headers...)}}})
	v.step(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{
		Body: []byte(body), EndOfStream: true}}})
}

// close half-closes the stream and waits for the server to end it.
func (v *envoyStream) close() {
	v.t.Helper()
	if err := v.stream.CloseSend(); err != nil {
		v.t.Fatal(err)
	}
	if r, err := v.stream.Recv(); err != io.EOF {
		v.t.Fatalf("stream end: %v %v, want EOF", r, err)
	}
}
