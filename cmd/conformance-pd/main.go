// Command conformance-pd checks condisagg's remote-prefill route and its disaggregation truth
// against a real vLLM prefill/decode pair that moves the KV cache over NixlConnector.
//
// It starts a prefill engine (kv_producer) and a decode engine (kv_consumer) from
// scripts/vllm-engine.sh, pd-sidecar beside the prefill engine, `condisagg serve` and a real
// Envoy in front, then sends a fixed corpus through Envoy one request at a time (and one batch
// at once). For every request it compares the route condisagg chose and the transfer outcome it
// recorded (Admin Recent) with the engines' own truth: the decode engine's
// vllm:prompt_tokens_by_source_total deltas (external_kv_transfer against local_compute) and
// vllm:nixl_num_failed_transfers_total; on local routes the credit condisagg gave the request
// with the engine's cached_tokens. Transfer failures are real: a fault proxy between pd-sidecar
// and the prefill engine rewrites the prefill answer's remote_engine_id for marked requests, so
// the decode engine's NIXL handshake fails, under kv_load_failure_policy "recompute" and then,
// after the decode engine is killed mid-request and started again, under "fail". The prefill
// engine is killed mid-prefill last. Envoy's ext_proc failure counters must stay 0 and every
// booking must be released. Any difference exits 1. `make conformance-pd` runs it.
//
// With -handoff it checks the slo policy's handoff placement instead (handoff.go): prefill on
// the decode engine that holds the prompt's prefix, decode on another decode engine that pulls
// the KV; both decode engines run kv_role kv_both behind a pd-sidecar each.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/condisagg/condisagg/internal/adminclient"
	"github.com/condisagg/condisagg/internal/engineproc"
	"github.com/condisagg/condisagg/internal/repo"
	condisaggv1 "github.com/condisagg/condisagg/proto/condisagg/v1"
	"github.com/condisagg/condisagg/tokenizer"
	"google.golang.org/grpc"
)

const (
	blockSize = 32
	modelName = "tiny-qwen3"
	loraName  = "sql-lora" // the adapter's request model name (vLLM --lora-modules NAME=DIR)
	prefillID = "prefill-0"
	decodeID  = "decode-0"
	decode1ID = "decode-1" // the handoff mode's decoder
)

type config struct {
	root, model, condisagg, sidecar, workdir string
	loraDir                                  string // the adapter both engines serve as loraName
	prefill, decode                          engineSpec
	sidecarPort, faultPort                   int
	// The handoff mode (-handoff): a second decode engine, a pd-sidecar in front of each
	// decode engine, and the holder's (decode-0's) smaller KV cache.
	handoff                     bool
	decode1                     engineSpec
	dSidecar0, dSidecar1        int
	holderBlocks                int
	listen, adminGRPC, adminWeb int
	blocks, maxLen              int
	startTimeout                time.Duration
	verbose                     bool
}

// engineSpec is one engine's ports: HTTP, KV events, replay, NIXL side channel.
type engineSpec struct{ port, kv, replay, side int }

func main() {
	var c config
	flag.StringVar(&c.model, "model", ".cache/models/tiny-qwen3", "engine checkpoint (scripts/vllm-tiny-model.py --arch qwen3)")
	flag.StringVar(&c.condisagg, "condisagg", "bin/condisagg", "condisagg binary")
	flag.StringVar(&c.sidecar, "pd-sidecar", "bin/pd-sidecar", "pd-sidecar binary")
	flag.StringVar(&c.workdir, "workdir", "", "logs and config (default: a new temp dir)")
	flag.StringVar(&c.loraDir, "lora-adapter", ".cache/models/tiny-qwen3-lora", "LoRA adapter both engines serve as "+loraName+" (scripts/vllm-tiny-model.py --lora-out)")
	flag.IntVar(&c.prefill.port, "prefill-port", 18401, "prefill engine HTTP port (KV events, replay and NIXL side channel: 15801, 15811, 5801)")
	flag.IntVar(&c.decode.port, "decode-port", 18402, "decode engine HTTP port (KV events, replay and NIXL side channel: 15802, 15812, 5802)")
	flag.IntVar(&c.sidecarPort, "sidecar-port", 18410, "pd-sidecar port: the prefill worker's endpoint as condisagg knows it")
	flag.IntVar(&c.faultPort, "fault-port", 18411, "the fault proxy between pd-sidecar and the prefill engine")
	flag.IntVar(&c.listen, "listen", 19502, "condisagg ext_proc port")
	flag.IntVar(&c.adminGRPC, "admin-grpc", 19503, "condisagg Admin gRPC port")
	flag.IntVar(&c.adminWeb, "admin-http", 19590, "condisagg admin HTTP port")
	flag.IntVar(&c.blocks, "blocks", 96, "KV cache blocks of 32 tokens per engine")
	flag.IntVar(&c.maxLen, "max-model-len", 1024, "engine max model length")
	flag.DurationVar(&c.startTimeout, "engine-start-timeout", 8*time.Minute, "how long an engine may take to answer /health")
	flag.BoolVar(&c.verbose, "v", false, "one line per request as it is checked")
	flag.BoolVar(&c.handoff, "handoff", false, "run the handoff check instead of the remote-prefill corpus: two kv_both decode engines, "+
		"a pd-sidecar in front of each, the slo policy with slo_handoff (handoff.go)")
	flag.IntVar(&c.decode1.port, "decode1-port", 18403, "-handoff: the second decode engine's HTTP port (KV events, replay and NIXL side channel: 15803, 15813, 5803)")
	flag.IntVar(&c.dSidecar0, "decode0-sidecar-port", 18412, "-handoff: the pd-sidecar in front of decode-0 (its endpoint as condisagg knows it)")
	flag.IntVar(&c.dSidecar1, "decode1-sidecar-port", 18413, "-handoff: the pd-sidecar in front of decode-1")
	flag.IntVar(&c.holderBlocks, "holder-blocks", 48, "-handoff: decode-0's KV cache blocks (under the decode-busy guard of 0.4 it has no room to decode the turn it holds)")
	flag.Parse()
	c.prefill.kv, c.prefill.replay, c.prefill.side = 15801, 15811, 5801
	c.decode.kv, c.decode.replay, c.decode.side = 15802, 15812, 5802
	c.decode1.kv, c.decode1.replay, c.decode1.side = 15803, 15813, 5803
	root, err := repo.Root()
	if err != nil {
		fatal(err)
	}
	c.root = root
	for _, p := range []*string{&c.model, &c.condisagg, &c.sidecar, &c.loraDir} {
		if !filepath.IsAbs(*p) {
			*p = filepath.Join(root, *p)
		}
	}
	if c.workdir == "" {
		if c.workdir, err = os.MkdirTemp("", "conformance-pd-"); err != nil {
			fatal(err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, &c)
	stop()
	os.Exit(code)
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "conformance-pd:", err)
	os.Exit(2)
}

// driver holds the running stack and the results.
type driver struct {
	c          *config
	prefill    *engineproc.Child
	decode     *engineproc.Child
	decode1    *engineproc.Child   // -handoff only
	children   []*engineproc.Child // every process started, for the peak RSS and the teardown
	admin      condisaggv1.AdminClient
	conn       *grpc.ClientConn
	envoy      *envoyStack
	fault      *faultProxy
	tok        *tokenizer.Tokenizer
	policy     string // the decode engine's kv_load_failure_policy
	http       *http.Client
	rows       []result
	checks     []result // whole-run checks: bookings released, Envoy counters
	nextID     int
	peakEngine int64
	explained  []string // -handoff: the first turn 2's forecasts, as Explain gave them
}

func run(ctx context.Context, c *config) int {
	start := time.Now()
	fmt.Printf("workdir %s\n", c.workdir)
	d := &driver{c: c, http: &http.Client{Timeout: 5 * time.Minute}}
	defer d.teardown()
	if err := d.start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "conformance-pd:", err)
		return 2
	}
	fmt.Printf("stack up after %s\n", time.Since(start).Round(time.Second))
	corpus := d.corpus
	if c.handoff {
		corpus = d.handoffCorpus
	}
	err := corpus(ctx)
	d.report(time.Since(start))
	if err != nil {
		fmt.Fprintln(os.Stderr, "conformance-pd:", err)
		return 2
	}
	if d.failed() {
		return 1
	}
	return 0
}

// start brings up both engines (at once), the fault proxy, pd-sidecar, condisagg and Envoy.
func (d *driver) start(ctx context.Context) error {
	if d.c.handoff {
		return d.startHandoff(ctx)
	}
	var err error
	if d.tok, err = tokenizer.Load(filepath.Join(d.c.root, "tokenizer/testdata/models/qwen3"), tokenizer.Options{}); err != nil {
		return err
	}
	errs := make(chan error, 2)
	go func() {
		var err error
		d.prefill, err = d.startEngine(ctx, "prefill", d.c.prefill, `"kv_role":"kv_producer"`)
		errs <- err
	}()
	go func() {
		var err error
		d.decode, err = d.startEngine(ctx, "decode", d.c.decode, `"kv_role":"kv_consumer","kv_load_failure_policy":"recompute"`)
		errs <- err
	}()
	for range 2 {
		if e := <-errs; e != nil && err == nil {
			err = e
		}
	}
	d.children = append(d.children, d.prefill, d.decode)
	if err != nil {
		return err
	}
	d.policy = "recompute"
	if d.fault, err = startFaultProxy(fmt.Sprintf("127.0.0.1:%d", d.c.faultPort), fmt.Sprintf("127.0.0.1:%d", d.c.prefill.port)); err != nil {
		return err
	}
	if err := d.startSidecar(ctx); err != nil {
		return err
	}
	if err := d.startRouter(ctx); err != nil {
		return err
	}
	d.envoy, err = startEnvoy(ctx, d.c)
	return err
}

// startEngine starts one engine of the pair with NixlConnector over UCX on loopback.
func (d *driver) startEngine(ctx context.Context, name string, s engineSpec, kvRole string) (*engineproc.Child, error) {
	return d.startEngineBlocks(ctx, name, s, kvRole, d.c.blocks)
}

func (d *driver) startEngineBlocks(ctx context.Context, name string, s engineSpec, kvRole string, blocks int) (*engineproc.Child, error) {
	return engineproc.StartEngine(ctx, engineproc.Engine{Root: d.c.root, Name: name, LogDir: d.c.workdir,
		Model: d.c.model, ServedName: modelName, Port: s.port, KVPort: s.kv, ReplayPort: s.replay,
		Blocks: blocks, MaxModelLen: d.c.maxLen, StartTimeout: d.c.startTimeout,
		Env: []string{"VLLM_NIXL_SIDE_CHANNEL_HOST=127.0.0.1", fmt.Sprintf("VLLM_NIXL_SIDE_CHANNEL_PORT=%d", s.side),
			"UCX_TLS=tcp,self,sm", "UCX_NET_DEVICES=lo"},
		Extra: []string{"--kv-transfer-config", `{"kv_connector":"NixlConnector",` + kvRole + `,"kv_buffer_device":"cpu"}`,
			// As established in docs/vllm-facts.md §d: a rank-8 adapter, one LoRA slot.
			"--enable-lora", "--lora-modules", loraName + "=" + d.c.loraDir, "--max-lora-rank", "8", "--max-loras", "1"}})
}

// startSidecar runs pd-sidecar on the prefill worker's advertised endpoint; it dials the
// prefill engine through the fault proxy.
func (d *driver) startSidecar(ctx context.Context) error {
	ep := fmt.Sprintf("127.0.0.1:%d", d.c.sidecarPort)
	sc, err := engineproc.Start("pd-sidecar", filepath.Join(d.c.workdir, "pd-sidecar.log"), nil, d.c.sidecar,
		"--listen", ep, "--admin-listen", "", "--allow", fmt.Sprintf("127.0.0.1:%d,%s", d.c.decode.port, ep), "--dial", ep+"="+fmt.Sprintf("127.0.0.1:%d", d.c.faultPort),
		"--default-decode-host", fmt.Sprintf("127.0.0.1:%d", d.c.prefill.port), "--prefill-timeout", "120s", "--drain-timeout", "2s")
	if err != nil {
		return err
	}
	d.children = append(d.children, sc)
	return engineproc.WaitHealthy(ctx, sc, "http://"+ep+"/healthz", 30*time.Second)
}

func (d *driver) routerConfig() string {
	if d.c.handoff {
		return d.handoffRouterConfig()
	}
	c := d.c
	return c.routerConfigHead() + `  # A prompt with no decode-side hit (ratio 1) always goes remote; one that is at least half
  # cached on the decode engine prefills there.
  conditional_disagg_config: {policy: isl_bounding, eff_isl_threshold: 1000000, eff_isl_ratio_threshold: 0.5}
pool: {scrape_interval: 0s}
workers:
` + workerLine(prefillID, "prefill", c.sidecarPort, c.prefill, c.blocks) +
		workerLine(decodeID, "decode", c.decode.port, c.decode, c.blocks)
}

// routerConfigHead is the serve config of both modes up to the router's policy object, which
// follows indented under router.
func (c *config) routerConfigHead() string {
	return fmt.Sprintf(`listen: 127.0.0.1:%d
admin_listen: 127.0.0.1:%d
admin_grpc_listen: 127.0.0.1:%d
log_level: info
debug_headers: true # x-condisagg-decision: the route and the credit of each request as routed
failure_mode: closed
unready_delay: 0s
drain_timeout: 1s
model: {tokenizer: %s, block_size: %d, lora_adapters: [%s]}
router:
  mode: kv
  kv_events: true
  conditional_disagg: true
`, c.listen, c.adminWeb, c.adminGRPC, filepath.Join(c.root, "tokenizer/testdata/models/qwen3"), blockSize, loraName)
}

// workerLine is one entry of the config's workers: the endpoint condisagg routes to (an
// engine, or the pd-sidecar in front of it) and the engine's KV event sockets.
func workerLine(name, role string, endpointPort int, e engineSpec, blocks int) string {
	return fmt.Sprintf("  - {name: %s, role: %s, endpoint: 127.0.0.1:%d, kv_events: tcp://127.0.0.1:%d, kv_replay: tcp://127.0.0.1:%d, num_gpu_blocks: %d}\n",
		name, role, endpointPort, e.kv, e.replay, blocks)
}

// startRouter starts condisagg serve and waits until its Admin service lists both workers.
func (d *driver) startRouter(ctx context.Context) error {
	cfgPath := filepath.Join(d.c.workdir, "condisagg.yaml")
	if err := os.WriteFile(cfgPath, []byte(d.routerConfig()), 0o644); err != nil {
		return err
	}
	p, err := engineproc.Start("condisagg", filepath.Join(d.c.workdir, "condisagg.log"), nil, d.c.condisagg, "serve", "--config", cfgPath)
	if err != nil {
		return err
	}
	d.children = append(d.children, p)
	if d.admin, d.conn, err = adminclient.Dial(fmt.Sprintf("127.0.0.1:%d", d.c.adminGRPC), adminclient.Options{}); err != nil {
		return err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if p.HasExited() {
			return fmt.Errorf("condisagg exited; log %s:\n%s", p.LogPath, engineproc.LastLines(p.Output(), 20))
		}
		if ws, err := d.workers(ctx); err == nil && len(ws) == d.numWorkers() {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("condisagg Admin not answering after 60s; log %s", p.LogPath)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (d *driver) workers(ctx context.Context) (map[string]*condisaggv1.Worker, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	r, err := d.admin.ListWorkers(cctx, &condisaggv1.ListWorkersRequest{})
	if err != nil {
		return nil, err
	}
	out := map[string]*condisaggv1.Worker{}
	for _, w := range r.Workers {
		out[w.Id] = w
	}
	return out, nil
}

func (d *driver) teardown() {
	if d.envoy != nil {
		d.envoy.stop()
	}
	if d.conn != nil {
		d.conn.Close()
	}
	if d.fault != nil {
		d.fault.close()
	}
	for i := len(d.children) - 1; i >= 0; i-- {
		if c := d.children[i]; c != nil {
			c.Shutdown()
		}
	}
}

// freePort reports whether a loopback port can be bound now (the engine restart waits for its
// predecessor's ports).
func freePort(port int) bool {
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return false
	}
	ln.Close()
	return true
}
