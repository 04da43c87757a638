// Package golden holds the test that binds the simulator to the server: a cluster run and the
// ext_proc server (over bufconn, with the real KV event decoder) fed the same operations must
// make the same decisions.
package golden

import (
	"context"
	"fmt"
	"net"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/condisagg/condisagg/internal/repo"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/condisagg/condisagg/cluster"
	"github.com/condisagg/condisagg/extproc"
	"github.com/condisagg/condisagg/feedback"
	"github.com/condisagg/condisagg/kvevents"
	"github.com/condisagg/condisagg/kvindex"
	"github.com/condisagg/condisagg/policy"
	"github.com/condisagg/condisagg/pool"
	"github.com/condisagg/condisagg/route"
	"github.com/condisagg/condisagg/sim"
	"github.com/condisagg/condisagg/sim/vllmsim"
	"github.com/condisagg/condisagg/tokenizer"
	"github.com/condisagg/condisagg/workload"
)

// virtualClock is the replay's wall clock: the simulator's epoch plus the op's virtual time.
type virtualClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *virtualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *virtualClock) set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// smallAgentic is a multi-turn agentic workload small enough for a unit test: shared global
// and group prefixes, private contexts that grow turn by turn, resets.
func smallAgentic(t *testing.T, rate float64) []workload.Request {
	c := workload.AgenticCode()
	c.Sessions, c.SessionRate, c.TurnsMin, c.TurnsMax = 24, rate, 4, 10
	c.GlobalTokens, c.GroupTokens, c.Groups = 1500, 400, 4
	c.SessionContext = workload.LogNormal{Mu: 6.5, Sigma: 0.8, Max: 4000}
	c.NewTokens = workload.LogNormal{Mu: 5.5, Sigma: 0.7, Max: 2000}
	c.OutputTokens = workload.LogNormal{Mu: 3.5, Sigma: 0.5, Max: 200}
	c.MaxPromptTokens = 12000
	reqs, err := c.Generate(7)
	if err != nil {
		t.Fatal(err)
	}
	return reqs
}

// recorded is a cluster run and the operations it performed, with their slices copied.
type recorded struct {
	rep *cluster.Report
	ops []cluster.Op
}

// runCluster runs the simulator on reqs with opts (its Trace is the recorder's).
func runCluster(t *testing.T, cfg cluster.Config, reqs []workload.Request, opts cluster.Options) recorded {
	t.Helper()
	var rec recorded
	trace := func(op cluster.Op) {
		op.Tokens = append([]uint32(nil), op.Tokens...)
		op.Subset = append([]string(nil), op.Subset...)
		op.Event.Hashes = append([]uint64(nil), op.Event.Hashes...)
		op.Event.Tokens = append([]uint32(nil), op.Event.Tokens...)
		rec.ops = append(rec.ops, op)
	}
	opts.Trace = trace
	rep, err := cluster.Run(context.Background(), cfg, reqs, opts)
	if err != nil {
		t.Fatal(err)
	}
	rec.rep = rep
	return rec
}

// server is the production stack for one replay: pool, index, route.Router and the ext_proc
// server on bufconn, with one kvevents.Applier per worker decoding vLLM batches.
type server struct {
	clock    *virtualClock
	pool     *pool.Pool
	client   extprocv3.ExternalProcessorClient
	appliers map[string]*kvevents.Applier
	// endpoints are every model's workers' endpoints by worker id.
	endpoints map[string]string
	enc       vllmsim.Encoder
	records   []route.Record
	router    *route.Router
	learner   *feedback.Learner
	policy    policy.Config
}

func newServer(t *testing.T, rep *cluster.Report) *server {
	t.Helper()
	s := &server{clock: &virtualClock{}, appliers: map[string]*kvevents.Applier{}, endpoints: map[string]string{},
		learner: feedback.New(), policy: rep.Policy}
	reg := prometheus.NewRegistry()
	pc := rep.Policy
	bs := rep.Policy.BlockSize
	km := kvevents.NewMetrics(reg)
	ropts := route.Options{Policy: &pc, Seed: rep.RouterSeed, Now: s.clock.Now, Learner: s.learner, Sessions: rep.SessionConfig,
		Observe: func(o *route.Outcome) { s.records = append(s.records, o.Record()) }}
	tok := qwen3(t)
	for i, m := range rep.Models {
		// Each model its own pool, index and event appliers, as serve's buildModel makes them.
		preg := prometheus.Registerer(reg)
		if len(rep.Models) > 1 {
			preg = prometheus.WrapRegistererWith(prometheus.Labels{"model": m.Name}, reg)
		}
		p, err := pool.New(m.Pool, pool.Options{Metrics: pool.NewMetrics(preg), Clock: s.clock})
		if err != nil {
			t.Fatal(err)
		}
		ix, err := kvindex.New(kvindex.Config{BlockSize: bs})
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range p.Workers() {
			ix.SetCapacity(kvindex.WorkerID(w.ID), int(w.KVCapacityBlocks)) // as serve's membership does
			s.appliers[w.ID] = kvevents.NewApplier(ix, kvindex.WorkerID(w.ID), 0, km, kvevents.Limits{})
			s.endpoints[w.ID] = w.Endpoint
		}
		if i == 0 {
			s.pool = p
		}
		ropts.Models = append(ropts.Models, route.Model{Name: m.Name, LoRAAdapters: m.LoRAAdapters, Tokenizer: tok, Index: ix, Pool: p})
	}
	s.enc = vllmsim.Encoder{Format: vllmsim.FormatMap, Hashes: vllmsim.HashInt, BlockSize: bs}
	r, err := route.New(ropts)
	if err != nil {
		t.Fatal(err)
	}
	s.router = r
	set := &extproc.Settings{Policy: &pc, Shadow: rep.ShadowPolicy, MaxBodyBytes: extproc.DefaultMaxBodyBytes, FailureMode: extproc.FailClosed,
		SessionHeaders: extproc.DefaultSessionHeaders}
	srv, err := extproc.NewServer(extproc.ServerOptions{Router: r, Settings: set, Metrics: extproc.NewMetrics(reg), Now: s.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	lis := bufconn.Listen(1 << 20)
	g := grpc.NewServer()
	extprocv3.RegisterExternalProcessorServer(g, srv)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient("passthrough:///bufconn",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	s.client = extprocv3.NewExternalProcessorClient(conn)
	return s
}

// request is one open ext_proc stream: the HTTP request Envoy is proxying.
type request struct {
	stream   extprocv3.ExternalProcessor_ProcessClient
	headers  bool // response headers sent
	answered bool // condisagg answered with an immediate response: no upstream answer follows
}

func (q *request) exchange(t *testing.T, req *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse {
	t.Helper()
	if err := q.stream.Send(req); err != nil {
		t.Fatal(err)
	}
	resp, err := q.stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func headerMap(kv ...string) *corev3.HeaderMap {
	hm := &corev3.HeaderMap{}
	for i := 0; i < len(kv); i += 2 {
		hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return hm
}

// decide sends a request as Envoy would in BUFFERED mode, and returns the routing headers
// condisagg set (nil for an immediate response): the chat body when there is one, else a
// completions request with the prompt as token ids.
func (s *server) decide(t *testing.T, tokens []uint32, model string, chat []byte, subset []string, session string) (*request, map[string]string) {
	t.Helper()
	stream, err := s.client.Process(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	q := &request{stream: stream}
	path, body := "/v1/chat/completions", chat
	if chat == nil {
		path, body = "/v1/completions", completionBody(tokens, model)
	}
	var md *corev3.Metadata
	if subset != nil { // the endpoint picker's hint, as Envoy passes it
		hint, err := structpb.NewStruct(map[string]any{extproc.SubsetKey: strings.Join(subset, ",")})
		if err != nil {
			t.Fatal(err)
		}
		md = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{extproc.SubsetNamespace: hint}}
	}
	kv := []string{":method", "POST", ":path", path, "content-type", "application/json"}
	if session != "" { // the client's session header (the Claude Code client's name for it)
		kv = append(kv, "x-claude-code-session-id", session)
	}
	q.exchange(t, &extprocv3.ProcessingRequest{
		ProtocolConfig: &extprocv3.ProtocolConfiguration{RequestBodyMode: filterv3.ProcessingMode_BUFFERED,
			ResponseBodyMode: filterv3.ProcessingMode_STREAMED},
		MetadataContext: md,
		Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			Headers: headerMap(kv...)}}})
	resp := q.exchange(t, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: body, EndOfStream: true}}})
	if resp.GetImmediateResponse() != nil {
		q.answered = true // Envoy sends the answer itself; the stream only drains
		return q, nil
	}
	h := map[string]string{}
	for _, o := range resp.GetRequestBody().GetResponse().GetHeaderMutation().GetSetHeaders() {
		h[o.GetHeader().GetKey()] = string(o.GetHeader().GetRawValue())
	}
	return q, h
}

// firstToken plays the decode worker's streamed answer up to its first token.
func (q *request) firstToken(t *testing.T) {
	t.Helper()
	if !q.headers {
		q.exchange(t, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
			ResponseHeaders: &extprocv3.HttpHeaders{Headers: headerMap(":status", "200", "content-type", "text/event-stream")}}})
		q.headers = true
	}
	q.exchange(t, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
		ResponseBody: &extprocv3.HttpBody{Body: []byte("data: {\"choices\":[{\"index\":0,\"text\":\"x\"}]}\n\n")}}})
}

// prefillDone sends the response headers of a remote request as pd-sidecar answers once its
// prefill leg is over (x-condisagg-prefill-ms).
func (q *request) prefillDone(t *testing.T) {
	t.Helper()
	q.exchange(t, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocv3.HttpHeaders{Headers: headerMap(":status", "200", "content-type", "text/event-stream",
			"x-condisagg-prefill-ms", "12")}}})
	q.headers = true
}

// end finishes the answer and the stream: a finished answer of output tokens reports them in
// its last usage chunk, as vLLM does with include_usage; a request that never answered fails.
func (q *request) end(t *testing.T, output int) {
	t.Helper()
	switch {
	case q.answered:
	case !q.headers:
		q.exchange(t, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
			ResponseHeaders: &extprocv3.HttpHeaders{Headers: headerMap(":status", "500"), EndOfStream: true}}})
	default:
		last := "data: [DONE]\n\n"
		if output > 0 {
			last = fmt.Sprintf("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":%d}}\n\n", output) + last
		}
		q.exchange(t, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
			ResponseBody: &extprocv3.HttpBody{Body: []byte(last), EndOfStream: true}}})
	}
	if err := q.stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := q.stream.Recv(); err != nil {
			return
		}
	}
}

// completionBody is a streamed completions request for model ("": the base model) with the
// prompt as token ids.
func completionBody(tokens []uint32, model string) []byte {
	if model == "" {
		model = "m"
	}
	var body strings.Builder
	fmt.Fprintf(&body, `{"model":%q,"stream":true,"prompt":[`, model)
	for i, tok := range tokens {
		if i > 0 {
			body.WriteByte(',')
		}
		body.WriteString(strconv.FormatUint(uint64(tok), 10))
	}
	body.WriteString(`]}`)
	return []byte(body.String())
}

// replay feeds the run's operations to the server in order and returns its records, one per
// request (the zero Record where the server refused the request). chats, when not nil, are
// the requests' chat bodies, sent in place of their token ids.
func (s *server) replay(t *testing.T, rec recorded, epoch time.Time, chats [][]byte) []route.Record {
	t.Helper()
	open := map[int]*request{}
	out := make([]route.Record, len(rec.rep.Decisions))
	endpoints := s.endpoints
	var payload []byte
	for _, op := range rec.ops {
		s.clock.set(epoch.Add(op.At))
		switch op.Kind {
		case cluster.OpEvent:
			payload = s.enc.AppendBatch(payload[:0], 0, []sim.Event{op.Event})
			if err := s.appliers[op.Worker].ApplyPayload(payload); err != nil {
				t.Fatalf("apply event kind %d of %s: %v", op.Event.Kind, op.Worker, err)
			}
		case cluster.OpDecide:
			n := len(s.records)
			var chat []byte
			if chats != nil {
				chat = chats[op.Index]
			}
			q, h := s.decide(t, op.Tokens, op.Model, chat, op.Subset, op.Session)
			if (h == nil) != (op.Err != nil) {
				t.Fatalf("request %d: server refused=%v, simulator error %v", op.Index, h == nil, op.Err)
			}
			if h == nil {
				q.end(t, 0)
				continue
			}
			open[op.Index] = q
			if len(s.records) != n+1 {
				t.Fatalf("request %d: %d records from one decision", op.Index, len(s.records)-n)
			}
			r := s.records[n]
			out[op.Index] = r
			want := endpoints[r.Decode]
			handoff := r.Route == policy.RouteHandoff.String()
			if r.Route != policy.RouteDecode.String() && !handoff { // remote and prefill_local dial the prefill worker
				want = endpoints[r.Prefill]
			}
			if got := h[extproc.HeaderDestination]; got != want {
				t.Fatalf("request %d: destination header %q, record names %q", op.Index, got, want)
			}
			// A handoff dials the decoder, whose sidecar sends the prefill leg to the holder.
			if got := h[extproc.HeaderPrefillHost]; handoff && (got != endpoints[r.Prefill] || got == want || h[extproc.HeaderRoute] != "decode") {
				t.Fatalf("request %d: handoff prefill host %q route %q, record names holder %q and decoder %q",
					op.Index, got, h[extproc.HeaderRoute], endpoints[r.Prefill], want)
			}
		case cluster.OpPrefillDone:
			open[op.Index].prefillDone(t)
		case cluster.OpFirstToken:
			open[op.Index].firstToken(t)
		case cluster.OpRelease:
			if q := open[op.Index]; q != nil {
				q.end(t, op.Output)
				delete(open, op.Index)
			}
		}
	}
	return out
}

// TestServerAndSimulatorDecideAlike is the golden test of the routing core: the same request
// sequence, KV events and answer events (first tokens, prefill legs, finished answers with
// their output lengths) through the ext_proc server (bufconn, vLLM-encoded events through the
// kvevents decoder, the replay's virtual clock) and through cluster.Run give identical
// decision records and, under the slo policy, an identical learned state (the controller's
// loops and the role advice), and both leave no booking behind.
func TestServerAndSimulatorDecideAlike(t *testing.T) {
	for _, tc := range []struct {
		name string
		rate float64 // sessions per second
		cfg  cluster.Config
		chat bool // the server gets chat bodies, the simulator their tokens as qwen3 renders them
		// subset: every third request carries a subset hint that leaves out one decode and
		// one prefill worker.
		subset bool
		// names: the `model` names the requests carry.
		names modelNames
	}{
		{"isl_or_load_2p2d", 4, cluster.Config{Prefill: 2, Decode: 2, Mode: cluster.Conditional, Seed: 3,
			Disagg: disagg(policy.ISLOrLoad, 512, 0.5)}, false, false, baseOnly},
		{"isl_bounding_1p3d_guard", 4, cluster.Config{Prefill: 1, Decode: 3, Mode: cluster.Conditional, Seed: 4,
			Disagg: guarded(disagg(policy.ISLBounding, 1024, 0.3), 0.9)}, false, false, baseOnly},
		// One prefill worker with a small token budget under the same traffic: the load
		// policies see it busy, so prefill_busy reasons and decode-busy guard denials occur.
		{"prefill_load_1p2d_saturated", 400, cluster.Config{Prefill: 1, Decode: 2, Mode: cluster.Conditional, Seed: 8,
			Disagg: guarded(busyAt(disagg(policy.PrefillLoad, 512, 0.5), 0.2), 0.3)}, false, false, baseOnly},
		{"aggregated_3d", 4, cluster.Config{Decode: 3, Mode: cluster.Aggregated, Seed: 5}, false, false, baseOnly},
		{"always_disaggregated_2p2d", 4, cluster.Config{Prefill: 2, Decode: 2, Mode: cluster.Disaggregated, Seed: 6}, false, false, baseOnly},
		// The slo policy places on all three routes (prefill_local: the whole request on a
		// prefill worker) and learns from every answer: the server's tickets, on the replay's
		// clock, must learn what the simulator's learned.
		{"slo_2p2d", 40, cluster.Config{Prefill: 2, Decode: 2, Mode: cluster.Conditional, Seed: 9, Disagg: slo(t, 1000, 12)}, false, false, baseOnly},
		{"slo_2p2d_tight_tpot", 400, cluster.Config{Prefill: 2, Decode: 2, Mode: cluster.Conditional, Seed: 9, Disagg: slo(t, 1000, 8)}, false, false, baseOnly},
		// slo_handoff: under a tight TPOT objective some prompts are prefilled on the decode
		// worker that holds their prefix and decoded on another (route handoff): the server
		// names the holder and the decoder the simulator chose, and books and releases alike.
		{"slo_handoff_1p3d_tight_tpot", 400, cluster.Config{Prefill: 1, Decode: 3, Mode: cluster.Conditional, Seed: 9,
			Disagg: withHandoff(slo(t, 1000, 8))}, false, false, baseOnly},
		// slo_fleet: the decisions read the fleet view, which the router builds from its own
		// decisions and the tickets' answers on its clock; the server's must be the simulator's.
		{"slo_fleet_2p2d_tight_tpot", 400, cluster.Config{Prefill: 2, Decode: 2, Mode: cluster.Conditional, Seed: 9, Disagg: sloFleet(slo(t, 1000, 8))}, false, false, baseOnly},
		// A candidate config decides beside the live one on every request: the server's
		// shadow statistics must be the simulator's.
		{"isl_or_load_shadow_slo", 40, cluster.Config{Prefill: 2, Decode: 2, Mode: cluster.Conditional, Seed: 11,
			Disagg: disagg(policy.ISLOrLoad, 512, 0.5), Shadow: ptr(slo(t, 1000, 12))}, false, false, baseOnly},
		// Chat bodies: the server renders Qwen3's chat template and tokenizes; the simulator
		// runs on the same tokens, so the engines' KV events carry what the server's index keys.
		{"chat_isl_or_load_2p2d", 4, cluster.Config{Prefill: 2, Decode: 2, Mode: cluster.Conditional, Seed: 12,
			Disagg: disagg(policy.ISLOrLoad, 2048, 0.5)}, true, false, baseOnly},
		{"subset_isl_or_load_2p3d", 40, cluster.Config{Prefill: 2, Decode: 3, Mode: cluster.Conditional, Seed: 13,
			Disagg: disagg(policy.ISLOrLoad, 512, 0.5)}, false, true, baseOnly},
		// A LoRA adapter beside the base model: the engines key an adapter's blocks apart and
		// name it in their events (lora_id, lora_name); the router keys its requests alike.
		{"lora_isl_or_load_2p2d", 4, cluster.Config{Prefill: 2, Decode: 2, Mode: cluster.Conditional, Seed: 14,
			Disagg: disagg(policy.ISLOrLoad, 512, 0.5), LoRAAdapters: []string{"sql-lora"}}, false, false, withLoRA},
		// Two models, each with its own fleet, pool and index (the first with an adapter), and
		// now and then a model no one serves: the router resolves every name as serve's
		// models list does, and decides for each model on that model's fleet alone.
		// Session affinity: each agentic session names itself in a session header; a turn
		// prefers its previous turn's worker until the guard (isl_or_load) or the forecast
		// (slo) overrides it, and both sides bind and expire alike (a short TTL on the
		// virtual clock).
		{"sessions_isl_or_load_2p2d_guard", 400, cluster.Config{Prefill: 2, Decode: 2, Mode: cluster.Conditional, Seed: 16,
			Disagg: guarded(disagg(policy.ISLOrLoad, 512, 0.5), 0.15), Sessions: route.SessionConfig{Enabled: true, TTL: 20 * time.Second, Max: 16}},
			false, false, baseOnly},
		{"sessions_slo_2p2d", 400, cluster.Config{Prefill: 2, Decode: 2, Mode: cluster.Conditional, Seed: 17, Disagg: noFleet(slo(t, 1000, 12)),
			Sessions: route.SessionConfig{Enabled: true}}, false, false, baseOnly},
		{"two_models_isl_or_load_2p2d", 8, cluster.Config{Prefill: 2, Decode: 2, Mode: cluster.Conditional, Seed: 15,
			Disagg: disagg(policy.ISLOrLoad, 512, 0.5), Models: []string{"qwen3-a", "qwen3-b"}, LoRAAdapters: []string{"sql-lora"}},
			false, false, twoModels},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reqs := smallAgentic(t, tc.rate)
			if len(reqs) < 100 {
				t.Fatalf("workload has %d requests, want >= 100", len(reqs))
			}
			model, err := sim.PerfModel("llama3.1-8b-h100")
			if err != nil {
				t.Fatal(err)
			}
			tc.cfg.Engine = sim.Config{NumGPUBlocks: 3000, MaxNumBatchedTokens: 4096, MaxNumSeqs: 64, Model: model}
			var chats [][]byte
			var opts cluster.Options
			if tc.chat {
				var prompts [][]uint32
				chats, prompts = chatCorpus(t, reqs)
				opts.Prompt = func(r *workload.Request) []uint32 { return prompts[r.Index] }
			}
			hinted := 0
			if tc.subset {
				// The simulator's workers are at 10.0.0.2.., prefill first; checked below.
				var hint []string
				for i := range tc.cfg.Prefill + tc.cfg.Decode {
					if i != 0 && i != tc.cfg.Prefill {
						hint = append(hint, "10.0.0."+strconv.Itoa(i+2)+":8000")
					}
				}
				opts.Subset = func(r *workload.Request) []string {
					if r.Index%3 != 1 {
						return nil
					}
					hinted++
					return hint
				}
			}
			adapted := 0
			switch tc.names {
			case withLoRA:
				opts.Model = func(r *workload.Request) string {
					if r.Session%2 == 1 {
						adapted++
						return "sql-lora"
					}
					return ""
				}
			case twoModels:
				opts.Model = func(r *workload.Request) string {
					if r.Index%23 == 22 {
						return "no-such-model"
					}
					if r.Session%3 == 2 {
						adapted++
					}
					return [...]string{"qwen3-a", "qwen3-b", "sql-lora"}[r.Session%3]
				}
			}
			rec := runCluster(t, tc.cfg, reqs, opts)
			if tc.names != baseOnly {
				checkAdapted(t, rec, adapted)
			}
			if tc.names == twoModels {
				checkFleets(t, rec)
			}
			if tc.subset {
				checkHinted(t, rec, hinted)
			}
			srv := newServer(t, rec.rep)
			got := srv.replay(t, rec, cluster.Epoch, chats)
			reasons, routes, sessions, cachedTokens := map[string]int{}, map[string]int{}, map[string]int{}, 0
			for i, want := range rec.rep.Decisions {
				if got[i] != want {
					t.Fatalf("request %d:\n server    %+v\n simulator %+v", i, got[i], want)
				}
				if want.Route == "" { // refused on both sides
					want.Route, want.Reason = "refused", "refused"
				}
				reasons[want.Reason]++
				routes[want.Route]++
				sessions[want.Session]++
				cachedTokens += want.Cached
			}
			if tc.cfg.Disagg.Policy == policy.SLOKind {
				sameLearning(t, srv, rec.rep, routes)
			}
			if tc.cfg.Disagg.SLOHandoff && (routes["handoff"] == 0 || routes["handoff"] != rec.rep.Handoffs) {
				t.Fatalf("handoffs: %d decisions, %d in the report: the case must place on the handoff route", routes["handoff"], rec.rep.Handoffs)
			}
			if tc.cfg.Shadow != nil {
				st := srv.router.ShadowStats()
				if rec.rep.Shadow == nil || st.Decisions == 0 || st.Decisions == st.SameRoute || !reflect.DeepEqual(st, *rec.rep.Shadow) {
					t.Fatalf("shadow statistics:\n server    %+v\n simulator %+v", st, rec.rep.Shadow)
				}
				t.Logf("shadow: %d decisions, %d on the same route", st.Decisions, st.SameRoute)
			}
			if rec.rep.ResidualLoad != 0 {
				t.Fatalf("simulator left load %d booked", rec.rep.ResidualLoad)
			}
			if tc.cfg.Sessions.Enabled {
				if sessions["hit"] == 0 || sessions["miss"] == 0 || sessions["hit"]+sessions["miss"] == len(got) {
					t.Fatalf("session outcomes %v: the case must bind, honour and override bindings", sessions)
				}
				if st := srv.router.SessionStats(); st != rec.rep.Sessions.Stats {
					t.Fatalf("session tables:\n server    %+v\n simulator %+v", st, rec.rep.Sessions.Stats)
				}
				t.Logf("sessions %v, table %+v", sessions, rec.rep.Sessions.Stats)
			}
			if tc.chat && cachedTokens == 0 {
				t.Fatal("no chat prompt found its prefix cached: the corpus tests no cache credit")
			}
			t.Logf("%d identical decisions, %d ops, %d prompt tokens credited as cached; routes %v; reasons %v",
				len(got), len(rec.ops), cachedTokens, routes, fmt.Sprint(reasons))
		})
	}
}

// modelNames are the `model` names a golden case's requests carry.
type modelNames int

const (
	baseOnly  modelNames = iota // none: the one unnamed model
	withLoRA                    // "" or the first model's adapter
	twoModels                   // either of two models, the first's adapter, or an unknown name
)

// checkFleets checks that the two-model case tested something: each model's requests were
// decided on its own fleet only (the second model's workers carry the "m1-" prefix), and an
// unknown model was refused.
func checkFleets(t *testing.T, rec recorded) {
	t.Helper()
	perModel, refused := map[string]int{}, 0
	for _, op := range rec.ops {
		if op.Kind != cluster.OpDecide {
			continue
		}
		if op.Model == "no-such-model" {
			if op.Err == nil {
				t.Fatalf("request %d: unknown model decided: %+v", op.Index, op.Record)
			}
			refused++
			continue
		}
		if op.Err != nil {
			continue
		}
		perModel[op.Model]++
		second := strings.HasPrefix(op.Record.Decode, "m1-")
		if second != (op.Model == "qwen3-b") || (op.Record.Prefill != "" && strings.HasPrefix(op.Record.Prefill, "m1-") != second) {
			t.Fatalf("request %d for %q decided on %s/%s: another model's fleet", op.Index, op.Model, op.Record.Prefill, op.Record.Decode)
		}
	}
	if refused == 0 || perModel["qwen3-a"] == 0 || perModel["qwen3-b"] == 0 || perModel["sql-lora"] == 0 {
		t.Fatalf("decisions per model %v, %d unknown-model refusals: the case tests too little", perModel, refused)
	}
}

// checkAdapted checks that the LoRA case tested something: requests named the adapter, their
// engines published blocks under it, and some request found its prefix cached.
func checkAdapted(t *testing.T, rec recorded, adapted int) {
	t.Helper()
	loraEvents, cached := 0, 0
	for _, op := range rec.ops {
		if op.Kind == cluster.OpEvent && op.Event.LoRA.Name == "sql-lora" {
			loraEvents++
		}
		if op.Kind == cluster.OpDecide && op.Model == "sql-lora" {
			cached += op.Record.Cached
		}
	}
	if adapted == 0 || loraEvents == 0 || cached == 0 {
		t.Fatalf("%d requests named the adapter, %d events carried it, %d of their prompt tokens cached", adapted, loraEvents, cached)
	}
}

// checkHinted checks that the subset case tested something: hinted requests were routed, and
// none of them to a worker the hint left out (one of each role).
func checkHinted(t *testing.T, rec recorded, hinted int) {
	t.Helper()
	out := map[string]pool.Role{}
	for _, w := range rec.rep.Models[0].Pool.Workers {
		out[w.Name] = w.Role
	}
	for _, op := range rec.ops {
		if op.Kind != cluster.OpDecide {
			continue
		}
		for _, e := range op.Subset {
			for _, w := range rec.rep.Models[0].Pool.Workers {
				if w.Endpoint == e {
					delete(out, w.Name)
				}
			}
		}
		if op.Subset != nil {
			break
		}
	}
	if len(out) != 2 {
		t.Fatalf("the hint leaves out %v, want one prefill and one decode worker", out)
	}
	routed := 0
	for _, op := range rec.ops {
		if op.Kind != cluster.OpDecide || op.Subset == nil || op.Err != nil {
			continue
		}
		routed++
		if _, ok := out[op.Record.Decode]; ok {
			t.Fatalf("request %d: decode worker %s is not in its hint", op.Index, op.Record.Decode)
		}
		if _, ok := out[op.Record.Prefill]; ok {
			t.Fatalf("request %d: prefill worker %s is not in its hint", op.Index, op.Record.Prefill)
		}
	}
	if hinted == 0 || routed == 0 {
		t.Fatalf("%d hinted requests, %d routed", hinted, routed)
	}
}

// sameLearning holds the server's learner to the simulator's: every loop of the slo
// controller (samples, smoothed ratio, correction, updates) and the role advice. The run must
// have placed on every route and fed the loops, or the comparison proves little.
func sameLearning(t *testing.T, srv *server, rep *cluster.Report, routes map[string]int) {
	t.Helper()
	for _, rt := range policy.Routes() {
		if rt == policy.RouteHandoff && !srv.policy.Disagg.SLOHandoff {
			continue // priced only with slo_handoff on
		}
		if routes[rt.String()] == 0 {
			t.Errorf("no %s placement: %v", rt, routes)
		}
	}
	state := srv.learner.State()
	if len(state) != len(rep.Feedback) {
		t.Fatalf("server %d loops, simulator %d", len(state), len(rep.Feedback))
	}
	samples := 0
	for i := range state {
		if state[i] != rep.Feedback[i] {
			t.Errorf("loop %s/%s:\n server    %+v\n simulator %+v", state[i].Route, state[i].Metric, state[i], rep.Feedback[i])
		}
		samples += state[i].Samples
		t.Logf("loop %s/%s: %d samples, ratio %.3f, factor %.3f, %d updates", state[i].Route, state[i].Metric,
			state[i].Samples, state[i].Ratio, state[i].Factor, state[i].Updates)
	}
	if samples == 0 {
		t.Error("the controller learned from no answer")
	}
	if got := srv.learner.Advice(&srv.policy, len(srv.pool.Workers())); got != rep.RoleAdvice || !got.Valid {
		t.Errorf("role advice:\n server    %+v\n simulator %+v", got, rep.RoleAdvice)
	}
}

// slo is the slo policy with the cost model of the simulated engines and objectives ttft and
// tpot (ms).
// slo is the slo policy with its controller on (slo_feedback true, not the default), so the
// golden cases hold the closed loop's learning alike on both sides too.
func slo(t *testing.T, ttft, tpot int) policy.Disagg {
	d, err := policy.ParseDisagg([]byte(fmt.Sprintf(`{"policy":"slo","cost_model":"llama3.1-8b-h100","slo_ttft_ms":%d,"slo_tpot_ms":%d,"slo_feedback":true}`, ttft, tpot)))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// withHandoff is d with slo_handoff on.
func withHandoff(d policy.Disagg) policy.Disagg {
	d.SLOHandoff = true
	return d
}

func ptr[T any](v T) *T { return &v }

// sloFleet turns on slo_fleet.
func sloFleet(d policy.Disagg) policy.Disagg {
	d.SLOFleet = true
	return d
}

// noFleet turns off slo_fleet: the sessions case needs remote placements, which this small
// trace's steady state does not favour.
func noFleet(d policy.Disagg) policy.Disagg {
	d.SLOFleet = false
	return d
}

// qwen3 is the real Qwen3 tokenizer and chat template of the test models.
func qwen3(t *testing.T) *tokenizer.Tokenizer {
	t.Helper()
	dir, err := repo.Model("qwen3")
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(dir, tokenizer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// chatCorpus turns each request into a chat body, one message per prompt segment (a system
// message, then user messages) whose words follow the segment's pseudo-tokens, so a session's
// turns share their leading messages as its segments share their prefix; prompts are the
// bodies' tokens as the real tokenizer renders them.
func chatCorpus(t *testing.T, reqs []workload.Request) (bodies [][]byte, prompts [][]uint32) {
	t.Helper()
	tok, vocab := qwen3(t), workload.DefaultVocab()
	var ids []uint32
	for i := range reqs {
		var b strings.Builder
		b.WriteString(`{"model":"m","stream":true,"messages":[`)
		for k, seg := range reqs[i].Prompt {
			role := "user"
			if k == 0 {
				role = "system"
			} else {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"role":%q,"content":"`, role)
			ids = vocab.AppendSegment(ids[:0], seg)
			for j, id := range ids {
				if j > 0 {
					b.WriteByte(' ')
				}
				b.WriteString("w" + strconv.FormatUint(uint64(id%997), 36))
			}
			b.WriteString(`"}`)
		}
		b.WriteString(`]}`)
		body := []byte(b.String())
		p, err := tok.EncodeChat(nil, body, tokenizer.ChatOptions{})
		if err != nil {
			t.Fatalf("request %d: render: %v", i, err)
		}
		bodies, prompts = append(bodies, body), append(prompts, p)
	}
	return bodies, prompts
}

func disagg(k policy.Kind, effISL int64, ratio float64) policy.Disagg {
	d := policy.DefaultDisagg()
	d.Policy, d.EffISLThreshold, d.EffISLRatioThreshold = k, effISL, ratio
	if k != policy.ISLBounding {
		d.PrefillBusyThreshold = policy.Set(0.8)
	}
	return d
}

func busyAt(d policy.Disagg, theta float64) policy.Disagg {
	d.PrefillBusyThreshold = policy.Set(theta)
	return d
}

func guarded(d policy.Disagg, theta float64) policy.Disagg {
	d.DecodeBusyThreshold = policy.Set(theta)
	return d
}
