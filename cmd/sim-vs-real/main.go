// Command sim-vs-real checks the simulator against real engines: two vLLM CPU engines, each
// pinned to its own core, are calibrated with `condisagg calibrate` (the pair through
// pd-sidecar, so the KV transfer over NixlConnector is measured too); then one slice of a
// Mooncake trace, scaled to the engines, is replayed by loadgen through the real Envoy and
// `condisagg serve` in each layout (aggregated on both engines, always-disaggregated 1P1D,
// conditional with isl_or_load and with slo on the calibrated model), and simulated by package
// cluster with the calibrated model on the same slice and layouts. It prints per layout TTFT
// and TPOT p50/p90/p99 and goodput, real (over the repeats) against simulated, whether the
// ranking by goodput agrees and whether p50 and p90 are within the targets. `make sim-vs-real`
// runs it; docs/sim-fidelity.md has the results.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/condisagg/condisagg/internal/repo"
	"github.com/condisagg/condisagg/workload"
)

const (
	blockSize = 32
	modelName = "tiny-qwen3"
)

// layouts are the routing layouts compared, in report order.
var layouts = []string{"aggregated", "disaggregated", "isl_or_load", "slo"}

type config struct {
	root, model, condisagg, sidecar, loadgen, workdir string
	trace                                             string
	modelFile                                         string // skip calibration: this cost model file
	attach                                            bool   // engines and pd-sidecar already run on the ports
	simOnly                                           bool   // simulate only (needs --model-file)
	requests, repeats, concurrency                    int
	inScale, outScale, timeScale                      float64
	sloText                                           string
	slo                                               workload.SLO
	blocks, maxLen, mnbt, maxSeqs                     int
	calMinutes                                        float64
	calRepeats, calMaxISL, calMaxBatch                int
	calMinR2                                          float64
	nice                                              int // of every process the run starts
	layouts                                           []string
	ports                                             ports
	startTimeout                                      time.Duration
}

type ports struct {
	engine, kv, replay, side             [2]int
	sidecar, listen, adminGRPC, adminWeb int
}

func main() {
	var c config
	var layoutList string
	flag.StringVar(&c.model, "model", ".cache/models/tiny-qwen3", "engine checkpoint (scripts/vllm-tiny-model.py --arch qwen3)")
	flag.StringVar(&c.condisagg, "condisagg", "bin/condisagg", "condisagg binary")
	flag.StringVar(&c.sidecar, "pd-sidecar", "bin/pd-sidecar", "pd-sidecar binary")
	flag.StringVar(&c.loadgen, "loadgen", "bin/loadgen", "loadgen binary")
	flag.StringVar(&c.workdir, "workdir", "", "logs, configs, the model file and results.json (default: a new temp dir)")
	flag.StringVar(&c.trace, "trace", "../shared/traces/mooncake/conversation_trace.jsonl", "Mooncake JSONL trace")
	flag.StringVar(&c.modelFile, "model-file", "", "use this cost model file instead of calibrating")
	flag.BoolVar(&c.attach, "attach", false, "use engines and pd-sidecar already running on the ports (development)")
	flag.BoolVar(&c.simOnly, "sim-only", false, "only simulate (with --model-file; for working on the simulator against results.json)")
	flag.IntVar(&c.requests, "requests", 200, "leading requests of the trace replayed")
	flag.IntVar(&c.repeats, "repeats", 3, "real runs per layout")
	flag.IntVar(&c.concurrency, "concurrency", 256, "loadgen's most requests in flight")
	flag.Float64Var(&c.inScale, "input-scale", 1.0/64, "prompt length factor (1/64: a 512-token trace block is 8 tokens, a quarter of an engine block)")
	flag.Float64Var(&c.outScale, "output-scale", 1.0/16, "output length factor")
	flag.Float64Var(&c.timeScale, "time-scale", 3, "arrival time factor (3: a third of the trace's rate)")
	flag.StringVar(&c.sloText, "slo", "ttft=1s,tpot=150ms", "SLO of goodput, and of the slo policy")
	flag.IntVar(&c.blocks, "blocks", 1024, "KV cache blocks of 32 tokens per engine")
	flag.IntVar(&c.maxLen, "max-model-len", 8192, "engine max model length")
	flag.IntVar(&c.mnbt, "max-num-batched-tokens", 2048, "engine token budget per step")
	flag.IntVar(&c.maxSeqs, "max-num-seqs", 64, "engine most running requests")
	flag.Float64Var(&c.calMinutes, "calibrate-minutes", 12, "condisagg calibrate --max-minutes")
	flag.IntVar(&c.calRepeats, "calibrate-repeats", 2, "condisagg calibrate --repeats")
	flag.IntVar(&c.calMaxISL, "calibrate-max-isl", 2048, "condisagg calibrate --max-isl (the slice's prompts are shorter; the longest probes cost minutes on a CPU engine)")
	flag.IntVar(&c.calMaxBatch, "calibrate-max-batch", 16, "condisagg calibrate --max-batch")
	flag.Float64Var(&c.calMinR2, "calibrate-min-r2", 0.8, "condisagg calibrate --min-r2 (a CPU engine on a shared 2-core host is noisier than calibrate's 0.95 allows)")
	flag.IntVar(&c.nice, "nice", -20, "nice value of the engines and the whole stack (negative needs root; on a shared host the engines' step times must not wait for other work)")
	flag.StringVar(&layoutList, "layouts", strings.Join(layouts, ","), "layouts to run")
	flag.DurationVar(&c.startTimeout, "engine-start-timeout", 8*time.Minute, "how long an engine may take to answer /health")
	flag.Parse()
	c.ports = ports{engine: [2]int{18601, 18602}, kv: [2]int{15901, 15902}, replay: [2]int{15911, 15912},
		side: [2]int{5901, 5902}, sidecar: 18610, listen: 19602, adminGRPC: 19603, adminWeb: 19690}
	var err error
	if c.slo, err = workload.ParseSLO(c.sloText); err != nil || c.slo.TTFT <= 0 || c.slo.TPOT <= 0 {
		fatal(fmt.Errorf("--slo %q: needs both ttft and tpot (%v)", c.sloText, err))
	}
	for _, l := range strings.Split(layoutList, ",") {
		if !known(l) {
			fatal(fmt.Errorf("--layouts: %q is not one of %s", l, strings.Join(layouts, ", ")))
		}
		c.layouts = append(c.layouts, l)
	}
	if c.simOnly && c.modelFile == "" {
		fatal(fmt.Errorf("--sim-only needs --model-file"))
	}
	if c.requests < 1 || c.repeats < 1 {
		fatal(fmt.Errorf("--requests %d and --repeats %d must be >= 1", c.requests, c.repeats))
	}
	root, err := repo.Root()
	if err != nil {
		fatal(err)
	}
	c.root = root
	for _, p := range []*string{&c.model, &c.condisagg, &c.sidecar, &c.loadgen, &c.trace} {
		if !filepath.IsAbs(*p) {
			*p = filepath.Join(root, *p)
		}
	}
	if c.workdir == "" {
		if c.workdir, err = os.MkdirTemp("", "sim-vs-real-"); err != nil {
			fatal(err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, &c)
	stop()
	os.Exit(code)
}

func known(l string) bool {
	for _, k := range layouts {
		if l == k {
			return true
		}
	}
	return false
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "sim-vs-real:", err)
	os.Exit(2)
}

// results is results.json: everything the report is made of.
type results struct {
	Flags       map[string]string
	Load        []string // uptime before each real run
	Calibration string   // condisagg calibrate's output
	NIXLMetrics []string // vllm:nixl_* series names the decode engine published
	Real        map[string][]row
	Sim         map[string]row // with the engine's request handling (RequestOverheadMS)
	SimBare     map[string]row // the step model alone
	// RequestOverheadMS is the calibration's request_overhead_ms, the simulator's
	// cluster.Config.RequestOverhead in Sim.
	RequestOverheadMS float64
}

func run(ctx context.Context, c *config) int {
	start := time.Now()
	fmt.Printf("workdir %s\n", c.workdir)
	reqs, err := loadWorkload(c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sim-vs-real:", err)
		return 2
	}
	fmt.Printf("workload: %s\n", describe(reqs))
	res := &results{Flags: map[string]string{}, Real: map[string][]row{}, Sim: map[string]row{}, SimBare: map[string]row{}}
	flag.VisitAll(func(f *flag.Flag) { res.Flags[f.Name] = f.Value.String() })
	if c.simOnly {
		m, overhead, err := loadModel(c.modelFile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "sim-vs-real:", err)
			return 2
		}
		for _, o := range []time.Duration{0, overhead} {
			for _, l := range c.layouts {
				r, err := simulate(ctx, c, m, o, l, reqs)
				if err != nil {
					fmt.Fprintln(os.Stderr, "sim-vs-real: simulate", l+":", err)
					return 2
				}
				fmt.Printf("sim  %-14s overhead %-6s %s\n", l, o.Round(time.Millisecond), r.short())
			}
		}
		return 0
	}
	if err := boostSession(c.nice); err != nil {
		fmt.Fprintf(os.Stderr, "sim-vs-real: session nice %d: %v (timings then share the host with other work)\n", c.nice, err)
	}
	s := &stack{c: c}
	defer s.teardown()
	if err := s.startEngines(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "sim-vs-real:", err)
		return 2
	}
	fmt.Printf("engines up after %s\n", time.Since(start).Round(time.Second))
	if c.modelFile == "" {
		c.modelFile = filepath.Join(c.workdir, "model.yaml")
		out, err := s.calibrate(ctx, c.modelFile)
		res.Calibration = out
		fmt.Print(out)
		if err != nil {
			fmt.Fprintln(os.Stderr, "sim-vs-real:", err)
			return 2
		}
	}
	res.NIXLMetrics = s.nixlMetrics(ctx)
	fmt.Printf("decode engine's vllm:nixl_* series: %s\n", strings.Join(res.NIXLMetrics, ", "))
	m, overhead, err := loadModel(c.modelFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sim-vs-real:", err)
		return 2
	}
	res.RequestOverheadMS = ms(overhead)
	for _, l := range c.layouts {
		for _, o := range []time.Duration{0, overhead} {
			r, err := simulate(ctx, c, m, o, l, reqs)
			if err != nil {
				fmt.Fprintln(os.Stderr, "sim-vs-real: simulate", l+":", err)
				return 2
			}
			if o == 0 {
				res.SimBare[l] = r
			}
			if o == overhead {
				res.Sim[l] = r
			}
			fmt.Printf("sim  %-14s overhead %-6s %s\n", l, o.Round(time.Millisecond), r.short())
		}
	}
	for rep := range c.repeats {
		for _, l := range c.layouts {
			if ctx.Err() != nil {
				return 2
			}
			load := loadAvg()
			res.Load = append(res.Load, fmt.Sprintf("%s #%d: %s", l, rep+1, load))
			r, err := s.replay(ctx, l, rep)
			if err != nil {
				fmt.Fprintln(os.Stderr, "sim-vs-real: replay", l+":", err)
				return 2
			}
			res.Real[l] = append(res.Real[l], r)
			fmt.Printf("real %-14s #%d %s (load %s)\n", l, rep+1, r.short(), load)
			saveJSON(filepath.Join(c.workdir, "results.json"), res)
		}
	}
	ok := report(os.Stdout, c, res)
	fmt.Printf("total %s; results %s\n", time.Since(start).Round(time.Second), filepath.Join(c.workdir, "results.json"))
	if !ok {
		return 1
	}
	return 0
}

func saveJSON(path string, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err == nil {
		err = os.WriteFile(path, b, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sim-vs-real: write", path+":", err)
	}
}

// loadAvg is the 1-, 5- and 15-minute load average, for the report beside every timing.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
