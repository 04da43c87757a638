// Command vllm-sim is a simulated vLLM worker: vLLM's OpenAI HTTP API, prefix-cached paged KV
// cache, KV events over ZeroMQ, /metrics and NixlConnector P/D roles, timed by the calibrated
// cost model of package sim and run faster than real time with --time-scale.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/condisagg/condisagg/internal/version"
	"github.com/condisagg/condisagg/sim"
	"github.com/condisagg/condisagg/sim/vllmsim"
	"github.com/condisagg/condisagg/tokenizer"
)

type names []string

func (n *names) String() string     { return strings.Join(*n, ",") }
func (n *names) Set(v string) error { *n = append(*n, v); return nil }

type options struct {
	host, model, tokenizer, perfModel string
	kvEventsConfig, kvEventsFormat    string
	kvEventsHashes, kvTransferConfig  string
	port, dataParallelSize            int
	served, loraFlags                 names
	lora                              []vllmsim.LoRAModule
	enableLoRA                        bool
	cfg                               sim.Config
	maxModelLen                       int
	timeScale, xferFailRate           float64
	oldReplay, promptDetails          bool
}

func parseFlags(args []string) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("vllm-sim", flag.ContinueOnError)
	fs.StringVar(&o.host, "host", "127.0.0.1", "HTTP listen host")
	fs.IntVar(&o.port, "port", 8000, "HTTP listen port (0 = ephemeral)")
	fs.StringVar(&o.model, "model", "qwen3", "model name (also the default served model name)")
	fs.Var(&o.served, "served-model-name", "served model name (repeatable)")
	fs.Var(&o.loraFlags, "lora-modules", "LoRA adapters served besides the base model, name=path (repeatable; one value may hold several separated by spaces)")
	fs.BoolVar(&o.enableLoRA, "enable-lora", false, "accepted for vLLM command lines; adapters are served when --lora-modules is given")
	fs.StringVar(&o.tokenizer, "tokenizer", "", "tokenizer directory or hf:<org>/<model> (required)")
	fs.StringVar(&o.perfModel, "perf-model", sim.DefaultPerfModel, "cost model: "+strings.Join(sim.PerfModelNames(), ", ")+", or a model file (.yaml) written by condisagg calibrate")
	fs.IntVar(&o.cfg.BlockSize, "block-size", sim.DefaultBlockSize, "tokens per KV block")
	fs.IntVar(&o.cfg.NumGPUBlocks, "num-gpu-blocks", 0, "KV capacity in blocks (default: the perf model's)")
	fs.IntVar(&o.cfg.MaxNumBatchedTokens, "max-num-batched-tokens", sim.DefaultMaxNumBatchedTokens, "token budget per step")
	fs.IntVar(&o.cfg.MaxNumSeqs, "max-num-seqs", sim.DefaultMaxNumSeqs, "max running sequences")
	fs.IntVar(&o.maxModelLen, "max-model-len", 131072, "max prompt + output tokens")
	fs.IntVar(&o.dataParallelSize, "data-parallel-size", 1, "data-parallel engines behind the one HTTP server; rank r publishes KV events on the PUB and replay ports + r")
	var seed uint64
	fs.Uint64Var(&seed, "seed", 0, "seed of block hashes (0 = random per process, like vLLM)")
	fs.Float64Var(&o.timeScale, "time-scale", 1, "simulated time runs this many times faster than real time")
	fs.StringVar(&o.kvEventsConfig, "kv-events-config", "", "vLLM KVEventsConfig JSON")
	fs.StringVar(&o.kvEventsFormat, "kv-events-format", "map", "event encoding: array (vLLM <= 0.23) or map (>= 0.24)")
	fs.StringVar(&o.kvEventsHashes, "kv-events-hashes", "int", "block hashes as int or bytes")
	fs.BoolVar(&o.oldReplay, "kv-events-old-replay-layout", false, "answer replays in the layout of vLLM < 0.26")
	fs.StringVar(&o.kvTransferConfig, "kv-transfer-config", "", `vLLM KVTransferConfig JSON, e.g. {"kv_connector":"NixlConnector","kv_role":"kv_consumer"}`)
	fs.Float64Var(&o.xferFailRate, "kv-transfer-failure-rate", 0, "simulator only: share of decode legs (do_remote_prefill) whose KV read fails, handled as the config's kv_load_failure_policy says (vLLM's default fail: HTTP 500 or an error event; recompute: computed again from the local hit); 1 = every one")
	fs.BoolVar(&o.promptDetails, "enable-prompt-tokens-details", false, "report usage.prompt_tokens_details.cached_tokens")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if o.tokenizer == "" {
		return nil, errors.New("vllm-sim: --tokenizer is required")
	}
	if o.dataParallelSize < 1 || o.dataParallelSize > 1024 {
		return nil, fmt.Errorf("vllm-sim: --data-parallel-size %d: must be in [1, 1024]", o.dataParallelSize)
	}
	if !(o.xferFailRate >= 0 && o.xferFailRate <= 1) {
		return nil, fmt.Errorf("vllm-sim: --kv-transfer-failure-rate %v: must be in [0, 1]", o.xferFailRate)
	}
	if o.xferFailRate > 0 && o.kvTransferConfig == "" {
		return nil, fmt.Errorf("vllm-sim: --kv-transfer-failure-rate %v: needs --kv-transfer-config", o.xferFailRate)
	}
	if seed == 0 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		seed = uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 | uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
	}
	o.cfg.Seed = seed
	if len(o.served) == 0 {
		o.served = names{o.model}
	}
	for _, v := range o.loraFlags {
		for _, f := range strings.Fields(v) {
			m, err := vllmsim.ParseLoRAModule(f)
			if err != nil {
				return nil, err
			}
			o.lora = append(o.lora, m)
		}
	}
	m, err := sim.ResolvePerfModel(o.perfModel, os.ReadFile)
	if err != nil {
		return nil, fmt.Errorf("vllm-sim: --perf-model: %w", err)
	}
	o.cfg.Model = m
	return o, nil
}

// kvTransfer parses --kv-transfer-config; the NIXL side channel comes from
// VLLM_NIXL_SIDE_CHANNEL_HOST/PORT as in vLLM.
func kvTransfer(s string) (*vllmsim.KVTransfer, error) {
	if s == "" {
		return nil, nil
	}
	var c struct {
		Connector string `json:"kv_connector"`
		Role      string `json:"kv_role"`
		EngineID  string `json:"engine_id"`
		Policy    string `json:"kv_load_failure_policy"`
	}
	if err := json.Unmarshal([]byte(s), &c); err != nil {
		return nil, fmt.Errorf("vllm-sim: --kv-transfer-config %q: %w", s, err)
	}
	switch c.Policy {
	case "":
		c.Policy = vllmsim.FailurePolicyFail // vLLM's default
	case vllmsim.FailurePolicyFail, vllmsim.FailurePolicyRecompute:
	default:
		return nil, fmt.Errorf("vllm-sim: --kv-transfer-config: kv_load_failure_policy %q: want %q or %q",
			c.Policy, vllmsim.FailurePolicyRecompute, vllmsim.FailurePolicyFail)
	}
	kt := &vllmsim.KVTransfer{Connector: c.Connector, Role: c.Role, EngineID: c.EngineID, Host: "localhost", Port: 5600, FailurePolicy: c.Policy}
	if kt.EngineID == "" {
		var b [16]byte
		_, _ = rand.Read(b[:])
		kt.EngineID = hex.EncodeToString(b[:])
	}
	if h := os.Getenv("VLLM_NIXL_SIDE_CHANNEL_HOST"); h != "" {
		kt.Host = h
	}
	if p := os.Getenv("VLLM_NIXL_SIDE_CHANNEL_PORT"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil {
			return nil, fmt.Errorf("vllm-sim: VLLM_NIXL_SIDE_CHANNEL_PORT=%q: %w", p, err)
		}
		kt.Port = n
	}
	return kt, nil
}

func run(ctx context.Context, args []string, log *slog.Logger) error {
	o, err := parseFlags(args)
	if err != nil {
		return err
	}
	kv, err := vllmsim.ParseKVEventsConfig(o.kvEventsConfig)
	if err != nil {
		return err
	}
	format, err := vllmsim.ParseEventFormat(o.kvEventsFormat)
	if err != nil {
		return err
	}
	hashes := vllmsim.HashInt
	switch o.kvEventsHashes {
	case "int":
	case "bytes":
		hashes = vllmsim.HashBytes
	default:
		return fmt.Errorf("vllm-sim: --kv-events-hashes %q: want int or bytes", o.kvEventsHashes)
	}
	kt, err := kvTransfer(o.kvTransferConfig)
	if err != nil {
		return err
	}
	if kt != nil {
		kt.FailureRate = o.xferFailRate
	}
	tok, err := tokenizer.LoadModel(ctx, o.tokenizer, tokenizer.HubOptionsFromEnv(), tokenizer.Options{CacheSegments: 4096})
	if err != nil {
		return fmt.Errorf("vllm-sim: load tokenizer %s: %w", o.tokenizer, err)
	}
	vocab, err := vllmsim.NewVocab(tok)
	if err != nil {
		return err
	}
	in, err := vllmsim.NewInstance(vllmsim.InstanceConfig{
		Engine: o.cfg, TimeScale: o.timeScale, KVEvents: kv, Format: format, Hashes: hashes, OldReplayLayout: o.oldReplay,
		DataParallelSize: o.dataParallelSize,
		Server: vllmsim.ServerConfig{ModelNames: o.served, MaxModelLen: o.maxModelLen, Tokenizer: tok, Vocab: vocab,
			KVTransfer: kt, PromptTokens: o.promptDetails, Logger: log, LoRAModules: o.lora},
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(o.host, strconv.Itoa(o.port)))
	if err != nil {
		return fmt.Errorf("vllm-sim: listen %s:%d: %w", o.host, o.port, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- in.Run(ctx, ln) }()
	attrs := []any{"endpoint", ln.Addr().String(), "num_gpu_blocks", in.Worker.Config().NumGPUBlocks}
	if o.dataParallelSize > 1 {
		attrs = append(attrs, "data_parallel_size", o.dataParallelSize)
	}
	// kv_events/kv_replay are rank 0's; with data parallelism kv_events_ranks and
	// kv_replay_ranks list every rank's, comma-separated, in rank order.
	var pubs, replays []string
	for _, p := range in.Publishers {
		pub, replay, err := p.Ready(ctx)
		if err != nil {
			cancel()
			<-done
			return err
		}
		pubs, replays = append(pubs, pub), append(replays, replay)
	}
	if len(pubs) > 0 {
		attrs = append(attrs, "kv_events", pubs[0], "kv_replay", replays[0])
	}
	if len(pubs) > 1 {
		attrs = append(attrs, "kv_events_ranks", strings.Join(pubs, ","), "kv_replay_ranks", strings.Join(replays, ","))
	}
	log.Info("vllm-sim listening", attrs...)
	return <-done
}

func main() {
	if version.Requested(os.Args[1:]) {
		fmt.Println(version.String("vllm-sim"))
		return
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], log); err != nil && !errors.Is(err, context.Canceled) {
		log.Error("vllm-sim failed", "err", err)
		os.Exit(1)
	}
}
