package extproc

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/condisagg/condisagg/decisionlog"
	"github.com/condisagg/condisagg/route"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/condisagg/condisagg/kvindex"
	"github.com/condisagg/condisagg/policy"
	"github.com/condisagg/condisagg/pool"
	"github.com/condisagg/condisagg/tokenizer"
)

// modelDir is where tokenizer/testdata/fetch_models.sh puts the Qwen3 tokenizer.
var modelDir = filepath.Join("..", "tokenizer", "testdata", "models", "qwen3")

// loadedTokenizer loads the real Qwen3 tokenizer once per test binary (it takes most of a
// second); the test fails naming the fetch script when the files are missing.
var loadedTokenizer = sync.OnceValues(func() (*tokenizer.Tokenizer, error) {
	if _, err := os.Stat(filepath.Join(modelDir, "tokenizer.json")); err != nil {
		return nil, err
	}
	return tokenizer.Load(modelDir, tokenizer.Options{CacheSegments: 4096})
})

func qwen3(t testing.TB) *tokenizer.Tokenizer {
	t.Helper()
	tk, err := loadedTokenizer()
	if err != nil {
		t.Fatalf("Qwen3 tokenizer missing under %s (%v): run tokenizer/testdata/fetch_models.sh (make deps does)", modelDir, err)
	}
	return tk
}

// Worker endpoints of the default test fleet.
const (
	d0Addr = "10.0.0.21:8000"
	d1Addr = "10.0.0.22:8000"
	p0Addr = "10.0.0.11:8000"
)

func defaultWorkers() []pool.WorkerConfig {
	return []pool.WorkerConfig{
		{Name: "decode-0", Role: pool.RoleDecode, Endpoint: d0Addr, NumGPUBlocks: 40000},
		{Name: "decode-1", Role: pool.RoleDecode, Endpoint: d1Addr, NumGPUBlocks: 40000},
		{Name: "prefill-0", Role: pool.RolePrefill, Endpoint: p0Addr, MaxNumBatchedTokens: 8192},
	}
}

// envOptions adjust the test environment.
type envOptions struct {
	workers   []pool.WorkerConfig // nil: defaultWorkers
	tokenizer route.Tokenizer     // nil: Qwen3
	settings  func(*Settings)
	disagg    func(*policy.Config)
	streams   route.EventStreams // nil: every stream live
	now       func() time.Time   // nil: time.Now
	// model names the one model (route.Model.Name) and turns on unknown-model handling;
	// "": the unnamed catch-all model that takes every name.
	model   string
	unknown route.UnknownModel
	logger  *slog.Logger // nil: discarded
	// maxModelLen is the one model's max_model_len (route.Model.MaxModelLen); 0: unknown.
	maxModelLen int
	sessions    route.SessionConfig // the router's session affinity (off: the zero value)
}

// env is a real router (tokenizer, kvindex, pool, policy) behind a real gRPC server on
// bufconn, and an ext_proc client playing Envoy.
type env struct {
	t       testing.TB
	reg     *prometheus.Registry
	pool    *pool.Pool
	index   *kvindex.Index
	router  *route.Router
	server  *Server
	metrics *Metrics
	recent  *decisionlog.Recent
	client  extprocv3.ExternalProcessorClient
	// nextHash is the last engine block hash storePrompt handed out (hashes are never reused).
	nextHash uint64
}

func newEnv(t testing.TB, o envOptions) *env {
	t.Helper()
	if o.workers == nil {
		o.workers = defaultWorkers()
	}
	if o.tokenizer == nil {
		o.tokenizer = qwen3(t)
	}
	reg := prometheus.NewRegistry()
	p, err := pool.New(pool.Config{Workers: o.workers, BlockSize: 16}, pool.Options{Metrics: pool.NewMetrics(reg)})
	if err != nil {
		t.Fatal(err)
	}
	ix, err := kvindex.New(kvindex.Config{BlockSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	pc := policy.DefaultConfig()
	pc.Enabled, pc.RouterMode, pc.KVEvents, pc.DistinctPools = true, "kv", true, true
	if o.disagg != nil {
		o.disagg(&pc)
	}
	if err := pc.Validate(); err != nil {
		t.Fatal(err)
	}
	set := &Settings{Policy: &pc, MaxBodyBytes: DefaultMaxBodyBytes, FailureMode: FailClosed, DebugHeaders: true}
	if o.settings != nil {
		o.settings(set)
	}
	m := NewMetrics(reg)
	ropts := route.Options{Tokenizer: o.tokenizer, Index: ix, Pool: p, Policy: set.Policy, Streams: o.streams, Now: o.now,
		Sessions: o.sessions}
	if o.model != "" || o.maxModelLen > 0 {
		ropts = route.Options{Models: []route.Model{{Name: o.model, Tokenizer: o.tokenizer, Index: ix, Pool: p, Streams: o.streams,
			MaxModelLen: o.maxModelLen}},
			UnknownModel: o.unknown, Policy: set.Policy, Now: o.now}
	}
	r, err := route.New(ropts)
	if err != nil {
		t.Fatal(err)
	}
	recent, err := decisionlog.NewRecent(decisionlog.RecentOptions{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(ServerOptions{Router: r, Settings: set, Metrics: m, Recent: recent, Logger: o.logger})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, reg: reg, pool: p, index: ix, router: r, server: srv, metrics: m, recent: recent}
	e.client = extprocv3.NewExternalProcessorClient(serveBufconn(t, func(g *grpc.Server) {
		extprocv3.RegisterExternalProcessorServer(g, srv)
	}))
	return e
}

// serveBufconn runs a gRPC server on an in-memory listener for the test's lifetime.
func serveBufconn(t testing.TB, register func(*grpc.Server)) *grpc.ClientConn {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	g := grpc.NewServer(serverOptions(GRPCOptions{MaxBodyBytes: DefaultMaxBodyBytes})...)
	register(g)
	done := make(chan struct{})
	go func() { defer close(done); _ = g.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///bufconn",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		// Envoy's C++ client does not share grpc-go's client buffer clears (codec.go), so the
		// fake Envoy encodes as the server does and the timings measure condisagg.
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(messageCodec{})),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		g.Stop()
		<-done
	})
	return conn
}

// booked returns the open bookings of every worker by name.
func (e *env) booked() map[string]pool.WorkerInfo {
	out := map[string]pool.WorkerInfo{}
	for _, w := range e.pool.Workers() {
		out[w.ID] = w
	}
	return out
}

// totalRequests is the number of open bookings (each has exactly one decode worker).
func (e *env) totalRequests() int64 {
	var n int64
	for _, w := range e.pool.Workers() {
		if w.Role == pool.RoleDecode {
			n += w.ActiveRequests
		}
	}
	return n
}

// envoy plays Envoy's side of one Process stream and checks every message we send against
// the protocol rules of envoy-extproc.md §7.
type envoy struct {
	t        testing.TB
	stream   extprocv3.ExternalProcessor_ProcessClient
	cancel   context.CancelFunc
	reqMode  filterv3.ProcessingMode_BodySendMode
	respMode filterv3.ProcessingMode_BodySendMode
	first    bool
	reqHdrs  int  // request headers responses seen
	respHdrs int  // response headers responses seen
	reqEOS   bool // we sent a request streamed_response with end_of_stream
}

func (e *env) open(reqMode, respMode filterv3.ProcessingMode_BodySendMode) *envoy {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	e.t.Cleanup(cancel)
	s, err := e.client.Process(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	return &envoy{t: e.t, stream: s, cancel: cancel, reqMode: reqMode, respMode: respMode, first: true}
}

func (v *envoy) send(req *extprocv3.ProcessingRequest) {
	v.t.Helper()
	if v.first {
		req.ProtocolConfig = &extprocv3.ProtocolConfiguration{RequestBodyMode: v.reqMode, ResponseBodyMode: v.respMode}
		v.first = false
	}
	if err := v.stream.Send(req); err != nil {
		v.t.Fatalf("send: %v", err)
	}
}

// hdrs builds a header map; values go in raw_value as Envoy sends them.
func hdrs(kv ...string) *corev3.HeaderMap {
	m := &corev3.HeaderMap{}
	for i := 0; i+1 < len(kv); i += 2 {
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return m
}

func (v *envoy) requestHeaders(eos bool, kv ...string) {
	v.t.Helper()
	v.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: hdrs(kv...), EndOfStream: eos}}})
}

func (v *envoy) requestBody(b []byte, eos bool) {
	v.t.Helper()
	v.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: b, EndOfStream: eos}}})
}

func (v *envoy) requestTrailers() {
	v.t.Helper()
	v.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{
		RequestTrailers: &extprocv3.HttpTrailers{}}})
}

func (v *envoy) responseHeaders(eos bool, kv ...string) {
	v.t.Helper()
	v.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocv3.HttpHeaders{Headers: hdrs(kv...), EndOfStream: eos}}})
}

func (v *envoy) responseBody(b []byte, eos bool) {
	v.t.Helper()
	v.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
		ResponseBody: &extprocv3.HttpBody{Body: b, EndOfStream: eos}}})
}

// recv receives one response and checks the protocol invariants on it.
func (v *envoy) recv() *extprocv3.ProcessingResponse {
	v.t.Helper()
	r, err := v.stream.Recv()
	if err != nil {
		v.t.Fatalf("recv: %v", err)
	}
	v.check(r)
	return r
}

func (v *envoy) check(r *extprocv3.ProcessingResponse) {
	v.t.Helper()
	var common *extprocv3.CommonResponse
	switch m := r.Response.(type) {
	case *extprocv3.ProcessingResponse_RequestHeaders:
		v.reqHdrs++
		if v.reqHdrs > 1 {
			v.t.Fatal("protocol: second request headers response")
		}
		common = m.RequestHeaders.GetResponse()
	case *extprocv3.ProcessingResponse_ResponseHeaders:
		v.respHdrs++
		if v.respHdrs > 1 {
			v.t.Fatal("protocol: second response headers response")
		}
		common = m.ResponseHeaders.GetResponse()
	case *extprocv3.ProcessingResponse_RequestBody:
		if v.reqHdrs == 0 {
			v.t.Fatal("protocol: request body response before the headers response")
		}
		if v.reqEOS {
			v.t.Fatal("protocol: request body response after our end_of_stream")
		}
		common = m.RequestBody.GetResponse()
		v.checkBody(common, v.reqMode, &v.reqEOS)
	case *extprocv3.ProcessingResponse_ResponseBody:
		common = m.ResponseBody.GetResponse()
		var eos bool
		v.checkBody(common, v.respMode, &eos)
	}
	if common == nil {
		return
	}
	if common.ClearRouteCache && common.HeaderMutation == nil {
		v.t.Fatal("protocol: clear_route_cache without a header mutation")
	}
	for _, h := range common.GetHeaderMutation().GetSetHeaders() {
		if h.GetHeader().GetValue() != "" {
			v.t.Fatalf("protocol: header %s set in value, not raw_value", h.GetHeader().GetKey())
		}
		if h.GetHeader().GetKey() == HeaderDestination {
			md := r.GetDynamicMetadata().GetFields()[MetadataNamespace].GetStructValue().GetFields()[HeaderDestination].GetStringValue()
			if md != string(h.GetHeader().GetRawValue()) {
				v.t.Fatalf("protocol: destination header %q != envoy.lb metadata %q", h.GetHeader().GetRawValue(), md)
			}
		}
	}
}

func (v *envoy) checkBody(c *extprocv3.CommonResponse, mode filterv3.ProcessingMode_BodySendMode, eos *bool) {
	v.t.Helper()
	sr := c.GetBodyMutation().GetStreamedResponse()
	if mode == filterv3.ProcessingMode_FULL_DUPLEX_STREAMED {
		if sr == nil {
			v.t.Fatal("protocol: plain body response in FULL_DUPLEX_STREAMED")
		}
		if len(sr.Body) > MaxChunkBytes {
			v.t.Fatalf("protocol: streamed chunk of %d bytes", len(sr.Body))
		}
		*eos = sr.EndOfStream
		return
	}
	if bm := c.GetBodyMutation(); bm != nil {
		// Body mutations outside full duplex: a BUFFERED body cleaned of a client's
		// engine-control members, replaced whole, with its Content-Length; a STREAMED chunk
		// replaced by its cleaned form (the route was fixed at the headers, which dropped the
		// client's Content-Length).
		_, whole := bm.GetMutation().(*extprocv3.BodyMutation_Body)
		if !whole || (mode != filterv3.ProcessingMode_BUFFERED && mode != filterv3.ProcessingMode_STREAMED) {
			v.t.Fatalf("protocol: body mutation %T in mode %v", bm.GetMutation(), mode)
		}
		if b := bm.GetBody(); mode == filterv3.ProcessingMode_BUFFERED && setHeaders(c)["content-length"] != strconv.Itoa(len(b)) {
			v.t.Fatalf("protocol: replaced body of %d bytes with content-length %q", len(b), setHeaders(c)["content-length"])
		}
	}
}

// closeAndDrain half-closes and waits for the server to end the stream.
func (v *envoy) closeAndDrain() {
	v.t.Helper()
	if err := v.stream.CloseSend(); err != nil {
		v.t.Fatal(err)
	}
	for {
		r, err := v.stream.Recv()
		if err != nil {
			if !strings.Contains(err.Error(), "EOF") && err.Error() != "EOF" {
				v.t.Fatalf("stream ended with %v", err)
			}
			return
		}
		v.t.Fatalf("unexpected response after close: %v", r)
	}
}

// setHeaders returns the headers a common response sets, by name.
func setHeaders(c *extprocv3.CommonResponse) map[string]string {
	out := map[string]string{}
	for _, h := range c.GetHeaderMutation().GetSetHeaders() {
		out[h.GetHeader().GetKey()] = string(h.GetHeader().GetRawValue())
	}
	return out
}

const chatPath = "/v1/chat/completions"

func chatBody(text string, stream bool) []byte {
	b := `{"model":"qwen3","messages":[{"role":"user","content":` + jsonString(text) + `}]`
	if stream {
		b += `,"stream":true`
	}
	return []byte(b + "}")
}

// jsonString is s as a JSON string.
func jsonString(s string) string {
	b, _ := json.Marshal(s) // a string always encodes
	return string(b)
}
