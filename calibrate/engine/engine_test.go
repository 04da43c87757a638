package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/condisagg/condisagg/calibrate"
	"github.com/condisagg/condisagg/cost"
	"github.com/condisagg/condisagg/internal/leakcheck"
	"github.com/condisagg/condisagg/internal/repo"
	"github.com/condisagg/condisagg/sidecar"
	"github.com/condisagg/condisagg/sim"
	"github.com/condisagg/condisagg/sim/vllmsim"
	"github.com/condisagg/condisagg/tokenizer"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
)

func TestMain(m *testing.M) { leakcheck.Main(m, "condisagg/calibrate/engine.") }

// simModel is the cost model the test's vllm-sim runs: its own coefficients, which calibrate
// must recover. Steps take 4–20 ms so the sweep takes seconds in real time, and every term
// moves a step by milliseconds (d1·16 streams = 4 ms, d2·32k context tokens = 4.9 ms, a2 at 8k
// tokens = 67 ms): above the timer and scheduling jitter of a busy 2-core machine. The
// transfer terms are not calibrate's defaults (0.5 ms, 40 GB/s), so that a file holding them
// shows they were measured.
const simModel = `name: test-engine
t0: 4
a1: 0.02
a2: 2.0e-6
d1: 0.25
d2: 1.5e-4
bytes_per_token: 65536
xfer_alpha_ms: 2
xfer_gbps: 10
num_gpu_blocks: 8192
`

// budgetTokens is the test engine's max_num_batched_tokens: large, so that a mixed step can
// carry a prompt long enough for the attention term to stand out (a2 at 16k tokens = 268 ms).
const budgetTokens = 16384

// loadTokenizer loads the test model's tokenizer and vocabulary once for every engine of a
// test (under -race loading is most of an engine's start).
func loadTokenizer(t *testing.T) (*tokenizer.Tokenizer, *vllmsim.Vocab) {
	t.Helper()
	tok, err := tokenizer.Load(repo.TestModel(t, "qwen3"), tokenizer.Options{CacheSegments: 64})
	if err != nil {
		t.Fatal(err)
	}
	vocab, err := vllmsim.NewVocab(tok)
	if err != nil {
		t.Fatal(err)
	}
	return tok, vocab
}

// startSim runs an in-process vllm-sim in real time (time scale 1) with the cost model of the
// model file text, and returns its base URL. kv, when not nil, is its NixlConnector side: the
// engine then answers kv_transfer_params and pulls remote KV in CostModel.TransferTime.
func startSim(t *testing.T, tok *tokenizer.Tokenizer, vocab *vllmsim.Vocab, modelFile string, maxModelLen int, kv *vllmsim.KVTransfer) string {
	t.Helper()
	m, _, err := cost.ParseFile("sim.yaml", []byte(modelFile))
	if err != nil {
		t.Fatal(err)
	}
	in, err := vllmsim.NewInstance(vllmsim.InstanceConfig{
		Engine:    sim.Config{Model: m, NumGPUBlocks: m.NumGPUBlocks, MaxNumBatchedTokens: budgetTokens, Seed: 3},
		TimeScale: 1,
		Server:    vllmsim.ServerConfig{ModelNames: []string{"qwen3"}, Tokenizer: tok, Vocab: vocab, MaxModelLen: maxModelLen, KVTransfer: kv},
	})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stop := in.Start(ln)
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("vllm-sim: %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}

// startSidecar runs the pd-sidecar's proxy (package sidecar, as pd-sidecar wires it) on
// loopback, allowing the given engines, and returns its base URL.
func startSidecar(t *testing.T, engines ...string) string {
	t.Helper()
	var hosts []string
	for _, e := range engines {
		hosts = append(hosts, strings.TrimPrefix(e, "http://"))
	}
	allow, err := sidecar.NewAllowlist(hosts)
	if err != nil {
		t.Fatal(err)
	}
	p, err := sidecar.New(sidecar.Config{}, allow, sidecar.Options{Metrics: sidecar.NewMetrics(prometheus.NewRegistry())})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sidecar.Serve(ctx, ln, p, time.Second) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("pd-sidecar: %v", err)
		}
		p.Close()
	})
	return "http://" + ln.Addr().String()
}

// nixl is a NixlConnector side of a test engine.
func nixl(engineID string) *vllmsim.KVTransfer {
	return &vllmsim.KVTransfer{Connector: "NixlConnector", Role: "kv_both", EngineID: engineID, Host: "127.0.0.1", Port: 5600}
}

// TestCalibrateAgainstSim runs calibrate against a vllm-sim P/D pair behind the pd-sidecar
// whose cost model is known (one pair for the three cases: loading the tokenizer is most of a
// start under -race). The decode engine is the --endpoint of every case.
func TestCalibrateAgainstSim(t *testing.T) {
	tok, vocab := loadTokenizer(t)
	url := startSim(t, tok, vocab, simModel, budgetTokens, nixl("decode-engine"))
	prefill := startSim(t, tok, vocab, simModel, budgetTokens, nixl("prefill-engine"))
	pd := startSidecar(t, url, prefill)
	t.Run("recovers_the_model", func(t *testing.T) { testRecoversSimModel(t, url, pd, prefill) })
	t.Run("max_minutes_cuts", func(t *testing.T) { testMaxMinutesCuts(t, url) })
	t.Run("refuses_a_busy_engine", func(t *testing.T) { testRefusesBusyEngine(t, url) })
	t.Run("transfer_sweep_limits", func(t *testing.T) { testTransferSweepLimits(t, url, pd, prefill) })
	t.Run("transfer_needs_nixl_metrics", func(t *testing.T) { testTransferNeedsNIXL(t, tok, vocab) })
}

// testRecoversSimModel runs `condisagg calibrate` against the vllm-sim P/D pair and checks
// that the model file it writes holds every coefficient within 5 % (the step-time terms from
// the decode engine, the transfer terms over the pair), the KV capacity the engine reports, and
// that the loader of serve, tune and vllm-sim accepts it.
func testRecoversSimModel(t *testing.T, url, pd, prefill string) {
	want, _, err := cost.ParseFile("sim.yaml", []byte(simModel))
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "engine.yaml")
	var stdout, stderr bytes.Buffer
	start := time.Now()
	code := Command(context.Background(), []string{"--endpoint", url, "--model", "qwen3", "-o", out,
		"--max-batch", "16", "--max-rps", "200", "--max-num-batched-tokens", "16384", "--max-minutes", "2",
		"--prefill-endpoint", pd, "--prefill-host", strings.TrimPrefix(prefill, "http://")}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	t.Logf("%s in %v", stdout.String(), time.Since(start).Round(time.Millisecond))
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	got, rec, err := cost.ParseFile(out, data)
	if err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	for _, c := range []struct {
		name      string
		got, want float64
	}{{"t0", got.T0, want.T0}, {"a1", got.A1, want.A1}, {"a2", got.A2, want.A2}, {"d1", got.D1, want.D1}, {"d2", got.D2, want.D2},
		{"xfer_alpha_ms", got.XferAlphaMS, want.XferAlphaMS}, {"xfer_gbps", got.XferGBps, want.XferGBps}, {"bytes_per_token", got.BytesPerToken, want.BytesPerToken}} {
		if e := math.Abs(c.got-c.want) / c.want; !(e <= 0.05) {
			t.Errorf("%s = %.4g, vllm-sim runs %.4g: error %.1f%% > 5%%", c.name, c.got, c.want, 100*e)
		}
	}
	if got.NumGPUBlocks != want.NumGPUBlocks || got.Name != "qwen3" {
		t.Errorf("capacity or name: %+v", got)
	}
	if rec == nil || rec.Endpoint != url || rec.Terms["prefill"].Samples < 10 || !(rec.Terms["decode"].R2 > 0.99) || !(rec.Terms["mixed"].R2 > 0.99) ||
		rec.Terms["transfer"].Samples < 10 || !(rec.Terms["transfer"].R2 > 0.99) || len(rec.NotMeasured) != 0 || rec.RelStdErr["xfer_gbps"] == 0 {
		t.Errorf("calibration record %+v", rec)
	}
	if _, err := cost.Resolve(out, os.ReadFile); err != nil {
		t.Errorf("Resolve: %v", err)
	}
	svg, err := os.ReadFile(strings.TrimSuffix(out, ".yaml") + ".svg")
	if err != nil || !bytes.Contains(svg, []byte("<svg")) || !bytes.Contains(svg, []byte("prefill (")) || !bytes.Contains(svg, []byte("transfer (")) {
		t.Errorf("svg: %v, %.200s", err, svg)
	}
}

// TestCalibrateBadEngines: an engine that is not there, one whose /metrics lacks the cache
// config, and one that does not serve the model are each refused with what to do.
func TestCalibrateBadEngines(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := "http://" + ln.Addr().String()
	ln.Close()
	// A vLLM started with --disable-log-stats: models answer, /metrics has no vllm: series.
	noStats := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/models":
			fmt.Fprint(w, `{"object":"list","data":[{"id":"m","object":"model","max_model_len":4096}]}`)
		case "/metrics":
			fmt.Fprint(w, "# TYPE python_gc_objects_collected_total counter\npython_gc_objects_collected_total 1\n")
		default:
			http.NotFound(w, r)
		}
	})}
	ln2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = noStats.Serve(ln2) }()
	defer func() { noStats.Close(); <-done }()
	tests := []struct {
		name, endpoint, model string
		want                  []string
	}{
		{"unreachable", gone, "m", []string{"GET /v1/models", "connection refused", "is the engine running"}},
		{"missing_cache_config", "http://" + ln2.Addr().String(), "m", []string{"no vllm:cache_config_info", "--disable-log-stats", "--num-gpu-blocks"}},
		{"unknown_model", "http://" + ln2.Addr().String(), "other", []string{`--model "other"`, "serves m"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := Command(context.Background(), []string{"--endpoint", tc.endpoint, "--model", tc.model, "-o", filepath.Join(t.TempDir(), "m.yaml"), "--quiet"}, &stdout, &stderr)
			if code != 1 {
				t.Fatalf("exit %d, want 1; stderr %s", code, stderr.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr %q lacks %q", stderr.String(), w)
				}
			}
		})
	}
}

// TestCalibrateFlagErrors: every bad flag is named at once, exit 2, before any request.
func TestCalibrateFlagErrors(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := Command(context.Background(), []string{"--endpoint", "localhost:8000", "--max-rps", "-1", "--max-minutes", "0", "--min-r2", "1.5", "-o", "m.json"}, &stdout, &stderr)
	if code != 2 {
		t.Fatalf("exit %d", code)
	}
	for _, w := range []string{"--endpoint", "--model", "--max-rps -1", "-o \"m.json\"", "--max-minutes 0", "--min-r2 1.5"} {
		if !strings.Contains(stderr.String(), w) {
			t.Errorf("stderr %q lacks %q", stderr.String(), w)
		}
	}
}

// TestCalibrateTransferFlagErrors: the P/D flags are checked with the others, and a transfer
// term given beside --prefill-endpoint (which measures it) is refused.
func TestCalibrateTransferFlagErrors(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := Command(context.Background(), []string{"--endpoint", "http://127.0.0.1:8000", "--model", "m", "-o", "m.yaml",
		"--prefill-endpoint", "127.0.0.1:8100", "--prefill-host", "p", "--xfer-gbps", "25"}, &stdout, &stderr)
	if code != 2 {
		t.Fatalf("exit %d", code)
	}
	for _, w := range []string{`--prefill-endpoint "127.0.0.1:8100": want the pd-sidecar's http://host:port`, `--prefill-host "p": want host:port`,
		"--xfer-gbps 25: measured with --prefill-endpoint; drop the flag"} {
		if !strings.Contains(stderr.String(), w) {
			t.Errorf("stderr %q lacks %q", stderr.String(), w)
		}
	}
	stderr.Reset()
	if code := Command(context.Background(), []string{"--endpoint", "http://127.0.0.1:8000", "--model", "m", "-o", "m.yaml",
		"--prefill-host", "127.0.0.1:8100"}, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "--prefill-host \"127.0.0.1:8100\": needs --prefill-endpoint") {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
}

// recorder is a Progress that keeps what it heard.
type recorder struct {
	total int
	done  []string
}

func (r *recorder) Plan(total int)    { r.total = total }
func (r *recorder) Done(label string) { r.done = append(r.done, label) }

// testTransferSweepLimits: the transfer probes report progress per probe, wait for the request
// rate cap (two requests each: P and D), and stop at the sweep's time limit like the others.
func testTransferSweepLimits(t *testing.T, url, pd, prefill string) {
	c := &client{base: url, model: "qwen3", http: &http.Client{}}
	cfg := Config{Endpoint: url, PrefillEndpoint: pd, PrefillHost: strings.TrimPrefix(prefill, "http://"), Model: "qwen3"}
	// 10 requests/s with a burst of 2: three probes (six requests) take at least 400 ms.
	r := &runner{c: c, pd: sidecarClient(cfg, c), rng: rand.New(rand.NewPCG(4, 5)), lim: rate.NewLimiter(10, 2)}
	probes := []calibrate.Probe{{Kind: calibrate.Transfer, ISL: 64}, {Kind: calibrate.Transfer, ISL: 512}, {Kind: calibrate.Transfer, ISL: 2048}}
	out := &Outcome{TransferProbes: probes}
	var rec recorder
	start := time.Now()
	if err := r.transfers(context.Background(), context.Background(), out, &rec); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 350*time.Millisecond {
		t.Errorf("three transfer probes under a 10 requests/s cap took %v, want >= 400 ms", took)
	}
	if want := []string{"transfer ISL 64", "transfer ISL 512", "transfer ISL 2048"}; strings.Join(rec.done, ",") != strings.Join(want, ",") ||
		len(out.Transfers) != 3 || out.ProbesDone != 3 || out.Transfers[2].Bytes != 2048*65536 {
		t.Fatalf("progress %q, samples %+v", rec.done, out.Transfers)
	}
	expired, cancel := context.WithTimeout(context.Background(), -time.Second)
	defer cancel()
	cut := &Outcome{TransferProbes: probes}
	if err := r.transfers(context.Background(), expired, cut, &rec); err != nil || !cut.Cut || len(cut.Transfers) != 0 {
		t.Fatalf("past the time limit: err %v, cut %v, %d samples", err, cut.Cut, len(cut.Transfers))
	}
}

// testMaxMinutesCuts: a time limit too short for the sweep stops it and the fit that follows
// says so.
func testMaxMinutesCuts(t *testing.T, url string) {
	_, err := Run(context.Background(), Config{Endpoint: url, Model: "qwen3", MaxDuration: 300 * time.Millisecond}, nil)
	if !errors.Is(err, calibrate.ErrTooFewSamples) || !strings.Contains(err.Error(), "cut by --max-minutes") {
		t.Fatalf("err = %v", err)
	}
}

// testRefusesBusyEngine: with another client's request running on the engine, the
// measurements would be that request's steps too; calibrate refuses before its first probe.
func testRefusesBusyEngine(t *testing.T, url string) {
	ctx, cancel := context.WithCancel(context.Background())
	c := &client{base: url, model: "qwen3", http: &http.Client{}}
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := c.stream(ctx, time.Now(), prompt(rand.New(rand.NewPCG(1, 2)), 64), 4000, func(n int, _ time.Duration) {
			if n == 1 {
				close(started)
			}
		})
		done <- err
	}()
	defer func() { cancel(); <-done }()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("background request: %v", err)
	}
	_, err := Run(context.Background(), Config{Endpoint: url, Model: "qwen3"}, nil)
	if err == nil || !strings.Contains(err.Error(), "requests running or waiting") || !strings.Contains(err.Error(), "no other traffic") {
		t.Fatalf("err = %v", err)
	}
}

// testTransferNeedsNIXL: a decode engine without a NixlConnector publishes no transfer metrics
// (and vllm-sim, as vLLM, ignores kv_transfer_params there): the transfer sweep stops with the
// flag to add.
func testTransferNeedsNIXL(t *testing.T, tok *tokenizer.Tokenizer, vocab *vllmsim.Vocab) {
	plain := startSim(t, tok, vocab, simModel, budgetTokens, nil)
	prefill := startSim(t, tok, vocab, simModel, budgetTokens, nixl("prefill-engine-2"))
	pd := startSidecar(t, plain, prefill)
	r := &runner{c: &client{base: plain, model: "qwen3", http: &http.Client{}}, rng: rand.New(rand.NewPCG(1, 2)), lim: rate.NewLimiter(rate.Inf, 1)}
	r.pd = sidecarClient(Config{Endpoint: plain, PrefillEndpoint: pd, PrefillHost: strings.TrimPrefix(prefill, "http://"), Model: "qwen3"}, r.c)
	_, err := r.transfer(context.Background(), calibrate.Probe{Kind: calibrate.Transfer, ISL: 256})
	if err == nil || !strings.Contains(err.Error(), "--kv-transfer-config") {
		t.Fatalf("err = %v, want the NixlConnector flag named", err)
	}
}
