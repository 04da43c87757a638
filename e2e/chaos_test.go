package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/condisagg/condisagg/envoy"
	condisaggv1 "github.com/condisagg/condisagg/proto/condisagg/v1"
)

// The chaos suite: faults and hostile clients under streaming load, through the real Envoys,
// with the router's promises (docs/reliability.md) asserted and measured per scenario.
// CHAOS=full selects the long run of `make chaos`; CHAOS_REPORT=path writes the table.

// chaosWindow is the detection window: a worker killed at t gets no request Envoy receives
// from t + chaosWindow on (condisagg probes /health every 500 ms and drops a refused worker
// after two failures, about 1 s).
const chaosWindow = 2 * time.Second

// decodeBlocks is the KV capacity of vllm-sim's default perf model (llama3.1-8b-h100).
const decodeBlocks = 29205

// chaosSize is one size of the suite.
type chaosSize struct {
	name       string
	streams    int           // clients of concurrent_streams
	background int           // clients of the load under every other scenario
	ramp       time.Duration // client starts are spread over this
	before     time.Duration // load before a fault
	after      time.Duration // load after it, longer than the window
	load       time.Duration // load of concurrent_streams (after the ramp)
	down       time.Duration // how long condisagg stays dead in the restart scenarios
	slow       time.Duration // how long a slow upload takes
	hostile    int           // hostile requests of each kind
	maxTokens  int
	timeScale  float64 // the simulated engines run this many times faster than real time
	// bigText is the size of the real-text prompt over the engine's max_model_len.
	bigText int
	// requestTimeout bounds each request; scenarioTimeout each scenario's waits.
	requestTimeout, scenarioTimeout time.Duration
}

var chaosSizes = map[string]chaosSize{
	// make test: a few seconds of load per scenario, about 80 s in all on 2 cores with -race.
	"short": {name: "short", streams: 100, background: 40, ramp: 500 * time.Millisecond,
		before: time.Second, after: 3 * time.Second, load: 3 * time.Second,
		down: time.Second, slow: time.Second, hostile: 2, maxTokens: 24, timeScale: 0.2,
		bigText: 1 << 20, requestTimeout: time.Minute, scenarioTimeout: scenarioTimeout},
	// make chaos: 1,000 concurrent streams, longer load around every fault.
	"full": {name: "full", streams: 1000, background: 200, ramp: 3 * time.Second,
		before: 5 * time.Second, after: 10 * time.Second, load: 20 * time.Second,
		down: 3 * time.Second, slow: 5 * time.Second, hostile: 10, maxTokens: 48, timeScale: 0.1,
		bigText: 8 << 20, requestTimeout: 3 * time.Minute, scenarioTimeout: 5 * time.Minute},
}

func chaosSizeFor(t *testing.T) chaosSize {
	name := os.Getenv("CHAOS")
	if name == "" {
		name = "short"
	}
	size, ok := chaosSizes[name]
	if !ok {
		t.Fatalf("CHAOS=%q: want short or full", name)
	}
	return size
}

// chaos is the suite's state: one stack for every scenario, each scenario leaving the fleet
// as it found it.
type chaos struct {
	s          *Stack
	size       chaosSize
	cl         *chaosClient
	rows       []chaosRow
	canary     string // an address every forged routing header points at
	canaryHits *atomic.Int64
}

func TestChaos(t *testing.T) {
	size := chaosSizeFor(t)
	wall := time.Now()
	s := startStack(t, Config{
		Disagg: mainDisagg, FullDuplexEnvoy: true, AccessLog: true, TimeScale: size.timeScale,
		Workers: []WorkerSpec{
			{Name: "prefill-0", Role: Prefill, MaxNumBatchedTokens: 8192},
			{Name: "prefill-1", Role: Prefill, MaxNumBatchedTokens: 8192},
			// The router knows their KV capacity (the perf model's), so second turns can bypass
			// to the worker holding turn 1: both routes carry load.
			{Name: "decode-0", Role: Decode, NumGPUBlocks: decodeBlocks},
			{Name: "decode-1", Role: Decode, NumGPUBlocks: decodeBlocks},
			{Name: "decode-2", Role: Decode, NumGPUBlocks: decodeBlocks},
			// Its KV events come from the test (zmq_garbage): nothing publishes there before.
			{Name: "decode-z", Role: Decode, NumGPUBlocks: decodeBlocks, Silent: true},
		},
	})
	c := &chaos{s: s, size: size, cl: newChaosClient(s, size.requestTimeout)}
	t.Cleanup(c.cl.close)
	c.canary, c.canaryHits = canary(t)
	c.waitFleet(t)
	for _, sc := range []struct {
		name string
		run  func(*testing.T, *chaos)
	}{
		// The router's RSS shrinks only slowly after a peak (Go keeps freed heap a while), and
		// each scenario's peak starts from the RSS it finds: the largest payloads come last.
		{"concurrent_streams", chaosConcurrentStreams},
		{"slow_uploads", chaosSlowUploads},
		{"client_disconnects", chaosClientDisconnects},
		{"forged_headers_and_kv_transfer_params", chaosForged},
		{"encoded_paths", chaosEncodedPaths},
		{"publisher_kill_and_restart", chaosPublisherRestart},
		{"kill_prefill_worker", func(t *testing.T, c *chaos) { c.killWorker(t, "prefill-1") }},
		{"kill_decode_worker", func(t *testing.T, c *chaos) { c.killWorker(t, "decode-2") }},
		{"router_restart_fail_open", func(t *testing.T, c *chaos) { c.restartRouter(t, s.Envoy, true) }},
		{"router_restart_fail_closed", func(t *testing.T, c *chaos) { c.restartRouter(t, s.EnvoyDuplex, false) }},
		{"zmq_garbage_and_oversized_frames", chaosZMQGarbage},
		{"bodies_around_limits", chaosLimits},
	} {
		t.Run(sc.name, func(t *testing.T) { sc.run(t, c) })
	}
	table := chaosTable(c.rows)
	t.Logf("chaos suite, %s size, %s:\n%s", size.name, time.Since(wall).Round(time.Second), table)
	if path := os.Getenv("CHAOS_REPORT"); path != "" {
		report := fmt.Sprintf("Size `%s`: %d concurrent streams in `concurrent_streams`, %d background clients under every "+
			"other scenario, %d hostile requests of each kind per Envoy, max_tokens %d, engines at time scale %g; "+
			"suite wall time %s.\n\n%s", size.name, size.streams, size.background, size.hostile, size.maxTokens,
			size.timeScale, time.Since(wall).Round(time.Second), table)
		if err := os.WriteFile(path, []byte(report), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// waitFleet waits until every worker is healthy and every publishing worker's event stream is
// up, so the first scenario starts with the whole fleet routable.
func (c *chaos) waitFleet(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), c.size.scenarioTimeout)
	defer cancel()
	err := Poll(ctx, func() error {
		ws, err := c.s.ListWorkers(ctx)
		if err != nil {
			return err
		}
		for _, w := range ws.Workers {
			spec := c.s.Worker(w.Name).Spec
			if !w.Healthy || (!spec.Silent && !w.GetEvents().GetConnected()) {
				return fmt.Errorf("%s not up yet: %v", w.Name, w)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func (c *chaos) ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), c.size.scenarioTimeout)
	t.Cleanup(cancel)
	return ctx
}

func (c *chaos) both() []*envoy.Process { return []*envoy.Process{c.s.Envoy, c.s.EnvoyDuplex} }

// underLoad runs clients conversations over envs: before, then fault (nil: none), then after;
// it returns once every request has ended, fault failing or not.
func (c *chaos) underLoad(clients int, envs []*envoy.Process, before time.Duration, fault func(), after time.Duration) {
	l := c.cl.startLoad(clients, envs, c.size.ramp, c.size.maxTokens)
	defer l.end()
	time.Sleep(before)
	if fault != nil {
		fault()
	}
	time.Sleep(after)
}

// scenarioRun is one scenario being measured.
type scenarioRun struct {
	c     *chaos
	name  string
	start time.Time
	hist  buckets // decisions of router processes that ended during the scenario
	hist0 buckets // the running process's histogram when the scenario (or the process) started
	rss   int64   // peak RSS of router processes that ended during the scenario
	// allowed says whether a failed request is explained by the scenario's fault; nil: none is.
	allowed func(*chaosResult) bool
	// undecided says whether a request may be served without a router decision (Envoy's
	// fail-open fallback); nil: none may, the router decides every request while it runs.
	undecided func(*chaosResult) bool
	// ref names a moment of the fault (ref.at); the row notes when the last allowed failure
	// started relative to it.
	ref struct {
		name string
		at   time.Time
	}
	dead  []deadWindow
	notes []string
}

func (c *chaos) begin(t *testing.T) *scenarioRun {
	t.Helper()
	sr := &scenarioRun{c: c, name: t.Name()[strings.LastIndexByte(t.Name(), '/')+1:], hist: buckets{}}
	if err := resetPeakRSS(c.s.Condisagg.Pid()); err != nil {
		t.Fatal(err)
	}
	var err error
	if sr.hist0, err = c.s.decisionBuckets(c.ctx(t)); err != nil {
		t.Fatal(err)
	}
	c.cl.take() // nothing from before counts
	sr.start = time.Now()
	return sr
}

func (sr *scenarioRun) note(format string, args ...any) {
	sr.notes = append(sr.notes, fmt.Sprintf(format, args...))
}

// routerEnds banks the peak RSS and decisions of the running router before it is killed.
func (sr *scenarioRun) routerEnds(t *testing.T) {
	t.Helper()
	rss, err := peakRSS(sr.c.s.Condisagg.Pid())
	if err != nil {
		t.Fatal(err)
	}
	now, err := sr.c.s.decisionBuckets(sr.c.ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	sr.rss, sr.hist, sr.hist0 = max(sr.rss, rss), sr.hist.add(now, sr.hist0), buckets{}
}

// maxListed bounds the unexpected outcomes a scenario prints.
const maxListed = 20

// finish judges every request of the scenario, checks that booked load returns to zero and
// that no request went to a dead worker after the window, and records the row.
func (c *chaos) finish(t *testing.T, sr *scenarioRun) {
	t.Helper()
	ctx := c.ctx(t)
	results := c.cl.take()
	routes := map[string]int{}
	for _, r := range results {
		route, _, _ := strings.Cut(strings.TrimPrefix(r.decision, "route="), ";")
		routes[route]++
	}
	t.Logf("routes: %v", routes)
	if len(results) > 0 {
		ds := make([]time.Duration, len(results))
		for i, r := range results {
			ds[i] = r.end.Sub(r.start)
		}
		slices.Sort(ds)
		t.Logf("request durations: p50 %s, max %s", ds[len(ds)/2].Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond))
	}
	row := chaosRow{scenario: sr.name, requests: len(results), toDead: -1}
	want := map[*envoy.Process]int{}
	undecided := 0
	for _, r := range results {
		if r.via == "duplex" {
			want[c.s.EnvoyDuplex]++
		} else {
			want[c.s.Envoy]++
		}
		if r.problem == "" && r.status == http.StatusOK && r.decision == "" {
			undecided++
			if sr.undecided == nil || !sr.undecided(r) {
				r.problem = "served without a router decision: the fail-open Envoy sent it on past condisagg"
			}
		}
		if r.problem == "" {
			continue
		}
		if sr.allowed != nil && sr.allowed(r) {
			row.failedAllowed++
			if row.failedAllowed <= 3 {
				t.Logf("allowed failure: %s: %s", r, r.problem)
			}
			continue
		}
		row.failedUnexpected++
		if row.failedUnexpected <= maxListed {
			t.Errorf("unexpected outcome: %s: %s", r, r.problem)
		}
	}
	if row.failedUnexpected > maxListed {
		t.Errorf("... %d unexpected outcomes in all", row.failedUnexpected)
	}
	if undecided > 0 {
		sr.note("%d served without a router decision", undecided)
	}
	if sr.ref.name != "" && row.failedAllowed > 0 {
		var last time.Time
		for _, r := range results {
			if r.problem != "" && sr.allowed(r) && r.start.After(last) {
				last = r.start
			}
		}
		sr.note("last allowed failure started %+.2f s from the %s", last.Sub(sr.ref.at).Seconds(), sr.ref.name)
	}
	var detail string
	row.bookingsLeft, detail = c.s.bookingsLeft(ctx, 15*time.Second)
	if row.bookingsLeft != 0 {
		t.Errorf("booked load left 15 s after the last request ended: %s", detail)
	}
	if len(sr.dead) > 0 {
		n, hits, err := c.s.sentToDead(ctx, sr.start, want, sr.dead)
		if err != nil {
			t.Errorf("sent to a dead worker: %v", err)
		}
		row.toDead = n
		for i, e := range hits {
			if i < maxListed {
				t.Errorf("request received at %s sent to a dead worker after the window: %+v", e.Start.Format("15:04:05.000"), e)
			}
		}
	}
	rss, err := peakRSS(c.s.Condisagg.Pid())
	if err != nil {
		t.Error(err)
	}
	row.peakRSS = max(sr.rss, rss)
	now, err := c.s.decisionBuckets(ctx)
	if err != nil {
		t.Error(err)
	} else {
		row.p99, row.p99Over, row.p99OK = sr.hist.add(now, sr.hist0).quantile(0.99)
	}
	row.notes = strings.Join(sr.notes, "; ")
	row.wall = time.Since(sr.start)
	c.rows = append(c.rows, row)
	t.Logf("%s", strings.Join(row.cells(), " | "))
}

// waitHealth polls `condisagg workers` until the worker's eligibility is healthy and returns how
// long that took since t0.
func (c *chaos) waitHealth(t *testing.T, ctx context.Context, name string, healthy bool, t0 time.Time) time.Duration {
	t.Helper()
	waitWorker(t, ctx, c.s, name, fmt.Sprintf("healthy=%v", healthy), func(w *condisaggv1.Worker) bool { return w.Healthy == healthy })
	return time.Since(t0)
}

// chaosConcurrentStreams: streams clients at once, half through each Envoy; every request must
// succeed, and nearly every client must have had its request in flight at the same time.
func chaosConcurrentStreams(t *testing.T, c *chaos) {
	sr := c.begin(t)
	c.cl.peak.Store(0)
	c.underLoad(c.size.streams, c.both(), c.size.ramp+c.size.load, nil, 0)
	peak := c.cl.peak.Load()
	sr.note("%d requests in flight at the peak", peak)
	if peak < int64(c.size.streams)*95/100 {
		t.Errorf("at most %d requests in flight at once; want >= 95%% of %d clients", peak, c.size.streams)
	}
	c.finish(t, sr)
}

// fresh is a new conversation's first chat body.
func (c *chaos) fresh(words int) []byte {
	return ChatBody([]Message{{Role: "user", Content: Words(c.cl.nextSeed(), words)}}, c.size.maxTokens)
}

// hostile runs one request per kind and Envoy, size.hostile times, concurrently, and waits.
func (c *chaos) hostile(kinds ...func(env *envoy.Process, i int)) {
	var wg sync.WaitGroup
	for i := range c.size.hostile {
		for _, env := range c.both() {
			for _, k := range kinds {
				wg.Go(func() { k(env, i) })
			}
		}
	}
	wg.Wait()
}

// chaosSlowUploads: bodies trickled in over size.slow (chunked and with a Content-Length) are
// served like any other; uploads abandoned half way leave nothing booked; the load around them
// is untouched.
func chaosSlowUploads(t *testing.T, c *chaos) {
	sr := c.begin(t)
	c.underLoad(c.size.background, c.both(), c.size.ramp, func() {
		c.hostile(func(env *envoy.Process, i int) {
			body := c.fresh(200)
			c.cl.do(chaosReq{kind: "slow_upload", via: env, body: body, upload: slowUpload(body, 10, c.size.slow, 0),
				contentLength: i%2 == 0, expect: expectOK})
		}, func(env *envoy.Process, i int) {
			body := c.fresh(200)
			c.cl.do(chaosReq{kind: "abandoned_upload", via: env, body: body, upload: slowUpload(body, 10, c.size.slow, 0.5),
				contentLength: i%2 == 1, expect: expectCancelled})
		})
	}, 0)
	c.finish(t, sr)
}

// chaosClientDisconnects: clients that go away during the prefill, right after the response
// headers and in the middle of the stream; their bookings are released and the load around
// them is untouched.
func chaosClientDisconnects(t *testing.T, c *chaos) {
	sr := c.begin(t)
	ctx := c.ctx(t)
	before, err := c.s.RouterMetric(ctx, "condisagg_requests_cancelled_total")
	if err != nil {
		t.Fatal(err)
	}
	c.underLoad(c.size.background, c.both(), c.size.ramp, func() {
		c.hostile(func(env *envoy.Process, i int) {
			c.cl.do(chaosReq{kind: "gone_during_prefill", via: env, body: c.fresh(300),
				cancelAt: time.Duration(20+40*i) * time.Millisecond, expect: expectCancelled})
		}, func(env *envoy.Process, _ int) {
			c.cl.do(chaosReq{kind: "gone_after_headers", via: env, body: c.fresh(300), cancelOnHeaders: true, expect: expectCancelled})
		}, func(env *envoy.Process, _ int) {
			c.cl.do(chaosReq{kind: "gone_mid_stream", via: env, body: c.fresh(300), cancelAfter: 3, expect: expectCancelled})
		})
	}, 0)
	after, err := c.s.RouterMetric(ctx, "condisagg_requests_cancelled_total")
	if err != nil {
		t.Fatal(err)
	}
	sr.note("%g streams counted cancelled by the router", after-before)
	if after-before < 1 {
		t.Errorf("condisagg_requests_cancelled_total did not move (%g -> %g)", before, after)
	}
	c.finish(t, sr)
}

// expectRouted: a complete answer routed by the router (its decision echoed), whatever the
// client's headers said.
func expectRouted(r *chaosResult) string {
	if p := expectOK(r); p != "" {
		return p
	}
	if r.decision == "" {
		return "no decision header: the router did not route it"
	}
	return ""
}

// smuggled variants of a chat body carrying the client's own kv_transfer_params: as the last
// member, twice (an engine reads the last), under an escaped key, as the first member.
func smuggled(body []byte, params string, variant int) []byte {
	open, rest := body[:1], body[1:len(body)-1]
	member := `"kv_transfer_params":` + params
	switch variant {
	case 0:
		return []byte(string(open) + string(rest) + "," + member + "}")
	case 1:
		return []byte(string(open) + string(rest) + "," + member + "," + member + "}")
	case 2:
		return []byte(string(open) + string(rest) + `,"kv\u005ftransfer_params":` + params + "}")
	default:
		return []byte(string(open) + member + "," + string(rest) + "}")
	}
}

// turn2 runs a conversation's first turn normally and returns the body of its second turn (the
// one that bypasses to the decode worker holding turn 1, with no sidecar on the way), or nil
// if turn 1 failed (recorded as such).
func (c *chaos) turn2(env *envoy.Process) []byte {
	msgs := []Message{{Role: "user", Content: Words(c.cl.nextSeed(), 200)}}
	r := c.cl.do(chaosReq{kind: "turn1", via: env, body: ChatBody(msgs, c.size.maxTokens), expect: expectOK})
	if !r.ok() {
		return nil
	}
	return ChatBody(nextTurn(msgs, r.text, c.cl.nextSeed(), 20), c.size.maxTokens)
}

// kvParams asks the decode worker to stop after one token and hand its KV to the canary.
func (c *chaos) kvParams() string {
	host, port, _ := net.SplitHostPort(c.canary)
	return fmt.Sprintf(`{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":"evil","remote_host":%q,"remote_port":%s}`, host, port)
}

// chaosForged: every routing header of the contract aimed at a canary (also repeated, and in
// underscore spelling, which Envoy refuses), and kv_transfer_params smuggled four ways into
// second turns; the router's own decision is served, nothing reaches the canary, no worker
// acts on the client's kv_transfer_params.
func chaosForged(t *testing.T, c *chaos) {
	sr := c.begin(t)
	ctx := c.ctx(t)
	stripped0, err := c.s.RouterMetric(ctx, "condisagg_request_fields_stripped_total", `field="kv_transfer_params"`)
	if err != nil {
		t.Fatal(err)
	}
	hits0 := c.canaryHits.Load()
	forged := forgedHeaders(c.canary)
	repeated := forged.Clone()
	for k := range repeated {
		repeated[k] = append(repeated[k], c.canary)
	}
	underscore := http.Header{"x_condisagg_route": {"decode"}, "x_gateway_destination_endpoint": {c.canary}}
	var smuggles atomic.Int64
	smuggle := func(variant int) func(*envoy.Process, int) {
		return func(env *envoy.Process, _ int) {
			if body := c.turn2(env); body != nil {
				smuggles.Add(1)
				c.cl.do(chaosReq{kind: fmt.Sprintf("kv_transfer_params_%d", variant), via: env,
					body: smuggled(body, c.kvParams(), variant), header: forged, expect: expectFullGeneration(c.size.maxTokens / 2)})
			}
		}
	}
	c.underLoad(c.size.background, c.both(), c.size.ramp, func() {
		c.hostile(smuggle(0), smuggle(1), smuggle(2), smuggle(3), func(env *envoy.Process, _ int) {
			c.cl.do(chaosReq{kind: "forged_headers", via: env, body: c.fresh(200), header: forged, expect: expectRouted})
		}, func(env *envoy.Process, _ int) {
			c.cl.do(chaosReq{kind: "forged_headers_repeated", via: env, body: c.fresh(200), header: repeated, expect: expectRouted})
		}, func(env *envoy.Process, _ int) {
			c.cl.do(chaosReq{kind: "underscore_headers", via: env, body: c.fresh(200), header: underscore, expect: expectRefusedByEnvoy(400)})
		})
	}, 0)
	stripped, err := c.s.RouterMetric(ctx, "condisagg_request_fields_stripped_total", `field="kv_transfer_params"`)
	if err != nil {
		t.Fatal(err)
	}
	sr.note("router stripped %g kv_transfer_params members from %d smuggling bodies (variant 1 carries two)", stripped-stripped0, smuggles.Load())
	if int64(stripped-stripped0) < smuggles.Load() {
		t.Errorf("router stripped kv_transfer_params from %g of %d bodies that carried them", stripped-stripped0, smuggles.Load())
	}
	if n := c.canaryHits.Load() - hits0; n != 0 {
		t.Errorf("the canary received %d requests", n)
	}
	c.refusedByEnvoy(t, sr.start, "http1.unexpected_underscore", 2*c.size.hostile)
	c.finish(t, sr)
}

// refusedByEnvoy checks that the Envoys' access logs show n requests since start refused with
// response code details details (the client may have seen only a closed connection).
func (c *chaos) refusedByEnvoy(t *testing.T, start time.Time, details string, n int) {
	t.Helper()
	ctx := c.ctx(t)
	err := Poll(ctx, func() error {
		got := 0
		for _, env := range c.both() {
			entries, err := c.s.AccessLog(env)
			if err != nil {
				return err
			}
			for _, e := range entries {
				if !e.Start.Before(start.Add(-time.Millisecond)) && e.Details == details {
					got++
				}
			}
		}
		if got != n {
			return fmt.Errorf("%d requests refused with %s in the access logs; want %d", got, details, n)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

// encodedPaths are spellings of the chat path (and near misses) a client may send.
var encodedPaths = []string{
	"/v1/chat/%63ompletions", "/v1//chat/completions", "/v1/./chat/completions", "/v1/x/../chat/completions",
	"/v1/x/%2e%2e/chat/completions", "/v1%2Fchat%2Fcompletions", "/v1/chat/completions?stream=false",
	"/%761/chat/completions", "/v1/chat/completions/", "/V1/chat/completions", "/v1/chat/completions;x=1",
	"/v1/chat/%2563ompletions",
}

// expectEncodedPath: the engine and the router read a path alike. Served (200) means routed by
// the router, with the client's kv_transfer_params not acted on; otherwise a client error from
// Envoy or the engine, never a server error.
func expectEncodedPath(minEvents int) func(*chaosResult) string {
	return func(r *chaosResult) string {
		switch {
		case r.status == http.StatusOK:
			return expectFullGeneration(minEvents)(r)
		case r.status >= 400 && r.status < 500:
			return ""
		}
		return "neither served nor refused as a client error"
	}
}

// chaosEncodedPaths: second turns with smuggled kv_transfer_params at every spelling of the
// chat path.
func chaosEncodedPaths(t *testing.T, c *chaos) {
	sr := c.begin(t)
	hits0 := c.canaryHits.Load()
	var mu sync.Mutex
	outcomes := map[string][]string{} // path: "via status" of each request
	c.underLoad(c.size.background, c.both(), c.size.ramp, func() {
		var wg sync.WaitGroup
		for _, p := range encodedPaths {
			for _, env := range c.both() {
				wg.Go(func() {
					if body := c.turn2(env); body != nil {
						r := c.cl.do(chaosReq{kind: "path " + p, via: env, path: p, body: smuggled(body, c.kvParams(), 0),
							expect: expectEncodedPath(c.size.maxTokens / 2)})
						mu.Lock()
						outcomes[p] = append(outcomes[p], fmt.Sprintf("%s %d", r.via, r.status))
						mu.Unlock()
					}
				})
			}
		}
		wg.Wait()
	}, 0)
	served, refused := 0, 0
	for _, p := range encodedPaths {
		slices.Sort(outcomes[p])
		t.Logf("%s: %s", p, strings.Join(outcomes[p], ", "))
		for _, o := range outcomes[p] {
			if strings.HasSuffix(o, " 200") {
				served++
			} else {
				refused++
			}
		}
	}
	sr.note("%d served as chat, %d refused with 4xx", served, refused)
	if n := c.canaryHits.Load() - hits0; n != 0 {
		t.Errorf("the canary received %d requests", n)
	}
	c.finish(t, sr)
}

// padded is a valid chat body of exactly size bytes: JSON whitespace before the closing brace,
// so only the byte limits are tested, not the tokenizer.
func padded(body []byte, size int) []byte {
	out := make([]byte, 0, size)
	out = append(out, body[:len(body)-1]...)
	out = append(out, bytes.Repeat([]byte(" "), size-len(body))...)
	return append(out, '}')
}

// chaosLimits: bodies one byte under, at and over max_body_bytes (10 MiB: condisagg's, Envoy's
// buffer and pd-sidecar's limit alike), headers under and over Envoy's 60 KiB, a real prompt over
// the engine's max_model_len, and bodies that are not chat requests.
func chaosLimits(t *testing.T, c *chaos) {
	sr := c.begin(t)
	ctx := c.ctx(t)
	timeouts0, err := c.s.Envoy.Counter(ctx, "http.llm.ext_proc.message_timeouts")
	if err != nil && !errors.Is(err, envoy.ErrNoStat) {
		t.Fatal(err)
	}
	const limit = envoy.DefaultMaxBodyBytes
	deep := `{"model":"qwen3","messages":` + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + "}"
	c.underLoad(c.size.background, c.both(), c.size.ramp, func() {
		c.hostile(func(env *envoy.Process, i int) {
			// At most two 10 MiB bodies in flight per Envoy: this scenario is about where the
			// limits are; twenty at once on 2 cores keep condisagg past Envoy's message_timeout.
			if i >= 2 {
				return
			}
			c.cl.do(chaosReq{kind: "body_limit_minus_1", via: env, body: padded(c.fresh(50), limit-1), expect: expectOK})
			c.cl.do(chaosReq{kind: "body_at_limit", via: env, body: padded(c.fresh(50), limit), expect: expectOK})
			c.cl.do(chaosReq{kind: "body_limit_plus_1", via: env, body: padded(c.fresh(50), limit+1), expect: expectError(413, "body_too_large")})
		}, func(env *envoy.Process, _ int) {
			c.cl.do(chaosReq{kind: "headers_50KiB", via: env, body: c.fresh(50),
				header: http.Header{"X-Chaos-Pad": {strings.Repeat("p", 50<<10)}}, expect: expectOK})
			c.cl.do(chaosReq{kind: "headers_70KiB", via: env, body: c.fresh(50),
				header: http.Header{"X-Chaos-Pad": {strings.Repeat("p", 70<<10)}}, expect: expectRefusedByEnvoy(431)})
		}, func(env *envoy.Process, _ int) {
			c.cl.do(chaosReq{kind: "empty_body", via: env, expect: expectError(400, "")})
			c.cl.do(chaosReq{kind: "no_messages", via: env, body: []byte(`{"model":"qwen3"}`), expect: expectError(400, "invalid_body")})
			c.cl.do(chaosReq{kind: "nested_100000_deep", via: env, body: []byte(deep), expect: expectError(400, "invalid_body")})
		})
		// Once per Envoy: a real prompt over the engine's max_model_len (131072 tokens) is the
		// engine's 400, after the router has tokenized all of it and decided within Envoy's
		// message_timeout (else the fail-open Envoy would have sent it on undecided).
		for _, env := range c.both() {
			text := Words(c.cl.nextSeed(), c.size.bigText/6)
			c.cl.do(chaosReq{kind: "prompt_over_max_model_len", via: env,
				body: ChatBody([]Message{{Role: "user", Content: text}}, c.size.maxTokens), expect: expectRoutedError(400)})
		}
	}, 0)
	seen := map[string]bool{}
	for _, r := range c.cl.peekResults() {
		if k := r.kind + " " + r.via; r.kind != "chat" && r.kind != "chat_turn2" && !seen[k] {
			seen[k] = true
			t.Logf("%s via %s: %d %s (decision %q)", r.kind, r.via, r.status, r.errCode, r.decision)
		}
	}
	timeouts, err := c.s.Envoy.Counter(ctx, "http.llm.ext_proc.message_timeouts")
	if err != nil && !errors.Is(err, envoy.ErrNoStat) {
		t.Fatal(err)
	}
	sr.note("%d ext_proc message timeouts", timeouts-timeouts0)
	c.finish(t, sr)
}

// chaosZMQGarbage: the test plays decode-z's KV event publisher and replay server and sends
// malformed frames, bad sequence numbers, non-batch payloads, a payload one byte over the limit
// and a 48 MiB frame; the router drops them, keeps serving, and still applies a valid batch
// afterwards.
func chaosZMQGarbage(t *testing.T, c *chaos) {
	sr := c.begin(t)
	ctx := c.ctx(t)
	w := c.s.Worker("decode-z")
	dropped0, err := c.s.RouterMetric(ctx, "condisagg_kv_messages_dropped_total", `worker="decode-z`)
	if err != nil {
		t.Fatal(err)
	}
	reconnects0, err := c.s.RouterMetric(ctx, "condisagg_kv_reconnects_total", `worker="decode-z`)
	if err != nil {
		t.Fatal(err)
	}
	pubCtx, stop := context.WithCancel(ctx)
	h := &hostilePublisher{pub: w.KVEvents, replay: w.KVReplay}
	proceed, sent, errc := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() { errc <- h.run(pubCtx, proceed, sent) }()
	defer func() {
		stop()
		if err := <-errc; err != nil {
			t.Error(err)
		}
	}()
	c.underLoad(c.size.background, c.both(), c.size.before, func() {
		// Subscribed once the router counts a dropped probe.
		err := Poll(ctx, func() error {
			n, err := c.s.RouterMetric(ctx, "condisagg_kv_messages_dropped_total", `worker="decode-z`)
			if err == nil && n <= dropped0 {
				err = fmt.Errorf("no probe dropped yet")
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		close(proceed)
		garbage := time.Now()
		select {
		case <-sent:
		case err := <-errc:
			t.Fatal(err)
		case <-ctx.Done():
			t.Fatal("garbage not sent")
		}
		// The valid batch the publisher repeats must reach the index: the stream survived.
		waitWorker(t, ctx, c.s, "decode-z", "indexed after the garbage", func(w *condisaggv1.Worker) bool { return w.IndexedGpuBlocks >= 2 })
		sr.note("valid batches applied again %.1f s after the garbage", time.Since(garbage).Seconds())
	}, c.size.after)
	dropped, err := c.s.RouterMetric(ctx, "condisagg_kv_messages_dropped_total", `worker="decode-z`)
	if err != nil {
		t.Fatal(err)
	}
	// libzmq checks a frame's size (ZMQ_MAXMSGSIZE) on its header, before allocating it, and
	// drops the peer: the 48 MiB frame shows as a reconnect, the only one the publisher causes.
	reconnects, err := c.s.RouterMetric(ctx, "condisagg_kv_reconnects_total", `worker="decode-z`)
	if err != nil {
		t.Fatal(err)
	}
	sr.note("%g messages dropped, %d replay requests answered with junk, %g reconnects", dropped-dropped0,
		h.replays.Load(), reconnects-reconnects0)
	if reconnects-reconnects0 < 1 {
		t.Errorf("the 48 MiB frame did not make the subscriber drop the connection (condisagg_kv_reconnects_total did not move)")
	}

	if dropped-dropped0 < 1 {
		t.Errorf("condisagg_kv_messages_dropped_total{worker=decode-z} did not move")
	}
	select {
	case <-c.s.Condisagg.Exited():
		t.Fatalf("condisagg exited: %v", c.s.Condisagg.Err())
	default:
	}
	c.finish(t, sr)
}

// allowedAround: a failure is explained by a fault from down to up (plus the window) when the
// request was in flight at down or started before up + the window.
func allowedAround(down, up time.Time) func(*chaosResult) bool {
	return func(r *chaosResult) bool { return r.start.Before(up.Add(chaosWindow)) && !r.end.Before(down) }
}

// killWorker: kill -9 a worker's engine under load. Requests in flight on it and those decided
// within the window may fail; none received after the window goes to it, and every other
// request succeeds. Afterwards the engine is restarted and waited for.
func (c *chaos) killWorker(t *testing.T, name string) {
	sr := c.begin(t)
	ctx := c.ctx(t)
	w := c.s.Worker(name)
	var killed time.Time
	c.underLoad(c.size.background, c.both(), c.size.before, func() {
		killed = time.Now()
		w.Sim.Kill()
		d := c.waitHealth(t, ctx, name, false, killed)
		sr.note("%s out of selection %.2f s after kill -9", name, d.Seconds())
		if d > chaosWindow {
			t.Errorf("%s still selectable %s after kill -9; want within %s", name, d, chaosWindow)
		}
	}, c.size.after)
	sr.allowed = allowedAround(killed, killed)
	sr.ref.name, sr.ref.at = "kill", killed
	sr.dead = []deadWindow{{worker: name, addrs: []string{w.SimAddr, w.Endpoint}, from: killed.Add(chaosWindow), until: time.Now()}}
	// The engine restarts now, so that the router's backed-off probes find it while the checks
	// run; nothing is sent after the load, so it changes none of the figures.
	restarted := time.Now()
	if err := c.s.RestartSim(ctx, name); err != nil {
		t.Fatal(err)
	}
	c.finish(t, sr)
	c.waitHealth(t, ctx, name, true, restarted)
}

// chaosPublisherRestart: decode-1's engine, and with it its KV event publisher, is killed -9
// and restarted on the same ports size.down later, under load: failures only around the kill, nothing sent to it
// while dead past the window, its old index cleared, a new one built from the new publisher,
// and the restarted engine back in service.
func chaosPublisherRestart(t *testing.T, c *chaos) {
	sr := c.begin(t)
	ctx := c.ctx(t)
	const name = "decode-1"
	w := c.s.Worker(name)
	clears0, err := c.s.RouterMetric(ctx, "condisagg_kv_stream_clears_total", `worker="`+name)
	if err != nil {
		t.Fatal(err)
	}
	var killed, up time.Time
	c.underLoad(c.size.background, c.both(), c.size.before, func() {
		killed = time.Now()
		w.Sim.Kill()
		// A container restart takes a while; the new engine binds the same ports.
		time.Sleep(c.size.down)
		if err := c.s.RestartSim(ctx, name); err != nil {
			t.Fatal(err)
		}
		up = time.Now()
		waitWorker(t, ctx, c.s, name, "back with its events", func(w *condisaggv1.Worker) bool {
			return w.Healthy && w.GetEvents().GetConnected() && w.IndexedGpuBlocks > 0
		})
		sr.note("engine up %.2f s after the kill, selectable and indexed again %.2f s after", up.Sub(killed).Seconds(), time.Since(killed).Seconds())
	}, c.size.after)
	sr.allowed = allowedAround(killed, killed)
	sr.ref.name, sr.ref.at = "kill", killed
	sr.dead = []deadWindow{{worker: name, addrs: []string{w.SimAddr}, from: killed.Add(chaosWindow), until: up}}
	clears, err := c.s.RouterMetric(ctx, "condisagg_kv_stream_clears_total", `worker="`+name)
	if err != nil {
		t.Fatal(err)
	}
	if clears-clears0 < 1 {
		t.Errorf("the router never cleared %s's index after its publisher restarted", name)
	}
	served, err := c.s.SimMetric(ctx, w, servedMetric)
	if err != nil {
		t.Fatal(err)
	}
	sr.note("restarted engine served %g requests", served)
	if served < 1 {
		t.Errorf("the restarted %s served nothing", name)
	}
	c.finish(t, sr)
}

// restartRouter: condisagg is killed -9 mid-stream and restarted on the same ports after
// size.down, with the load on one Envoy. Fail-open (BUFFERED): every request succeeds, those
// without a router through decode_fallback. Fail-closed (full duplex): requests in flight at
// the kill and those started before the router is back (plus the window) may fail; the rest
// succeed.
func (c *chaos) restartRouter(t *testing.T, env *envoy.Process, failOpen bool) {
	sr := c.begin(t)
	ctx := c.ctx(t)
	var killed, back time.Time
	var smugglers sync.WaitGroup
	c.underLoad(c.size.background, []*envoy.Process{env}, c.size.before, func() {
		sr.routerEnds(t)
		killed = time.Now()
		c.s.Condisagg.Kill()
		if failOpen {
			// With the router gone, Envoy forwards bodies as the client sent them: a client's
			// kv_transfer_params must still not be acted on by the worker that gets them.
			for i := range c.size.hostile {
				smugglers.Go(func() {
					c.cl.do(chaosReq{kind: "kv_transfer_params_router_down", via: env,
						body: smuggled(c.fresh(200), c.kvParams(), i%4), expect: expectNotActedOn(c.size.maxTokens / 2)})
				})
			}
		}
		time.Sleep(c.size.down)
		if err := c.s.RestartRouter(ctx); err != nil {
			t.Fatal(err)
		}
		if err := Poll(ctx, func() error { return c.s.ready(ctx) }); err != nil {
			t.Fatal(err)
		}
		back = time.Now()
		sr.note("router down %.2f s", back.Sub(killed).Seconds())
		smugglers.Wait()
	}, c.size.after)
	if !failOpen {
		sr.allowed = allowedAround(killed, back)
		sr.ref.name, sr.ref.at = "router's return", back
	} else {
		// Only requests that met the dead router go past it; those after its return are decided.
		sr.undecided = func(r *chaosResult) bool { return r.start.Before(back) && !r.end.Before(killed) }
	}
	var undecided, refused, cut int
	for _, r := range c.cl.peekResults() {
		switch {
		case r.ok() && r.decision == "":
			undecided++
		case r.errCode == "router_unavailable":
			refused++
		case r.status == http.StatusOK && !r.done:
			cut++
		}
	}
	if !failOpen {
		sr.note("%d streams cut at the kill, %d requests answered 503 router_unavailable", cut, refused)
	} else {
		if undecided == 0 {
			t.Errorf("no request was served through decode_fallback while the router was down")
		}
		acted := 0
		for _, r := range c.cl.peekResults() {
			if r.kind == "kv_transfer_params_router_down" && r.problem != "" {
				acted++
			}
		}
		sr.note("%d of %d client kv_transfer_params acted on while the router was down", acted, c.size.hostile)
		if acted > 0 {
			t.Errorf("fail-open: with condisagg down, %d of %d client kv_transfer_params (do_remote_decode, remote_host %s) "+
				"reached a decode worker through Envoy's fallback route and were acted on: the Lua guard did not cut them",
				acted, c.size.hostile, c.canary)
		}
	}
	c.finish(t, sr)
}
