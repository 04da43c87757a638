package e2e

import (
	"cmp"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/condisagg/condisagg/envoy"
	"github.com/condisagg/condisagg/internal/natstest"
	"github.com/condisagg/condisagg/internal/proc"
	"github.com/condisagg/condisagg/internal/repo"
)

// Binaries are the built executables a stack runs.
type Binaries struct {
	Condisagg, VLLMSim, PDSidecar string
}

// Build compiles condisagg, vllm-sim and pd-sidecar into dir.
func Build(ctx context.Context, dir string) (Binaries, error) {
	root, err := repo.Root()
	if err != nil {
		return Binaries{}, err
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", dir+string(filepath.Separator),
		"./cmd/condisagg", "./cmd/vllm-sim", "./cmd/pd-sidecar")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return Binaries{}, fmt.Errorf("e2e: go build into %s: %w\n%s", dir, err, out)
	}
	return Binaries{Condisagg: filepath.Join(dir, "condisagg"), VLLMSim: filepath.Join(dir, "vllm-sim"),
		PDSidecar: filepath.Join(dir, "pd-sidecar")}, nil
}

// Role is a worker's role in the fleet.
type Role string

const (
	Prefill Role = "prefill"
	Decode  Role = "decode"
)

// WorkerSpec describes one simulated vLLM worker.
type WorkerSpec struct {
	Name string
	Role Role
	// NumGPUBlocks is the worker's KV capacity (vllm-sim --num-gpu-blocks and the router's
	// num_gpu_blocks); 0 = the perf model's default, unknown to the router.
	NumGPUBlocks int
	// MaxNumBatchedTokens is told to the router (mnbt, the prefill-busy budget); 0 = unknown.
	MaxNumBatchedTokens int
	// DataParallelSize is vllm-sim --data-parallel-size and the router's data_parallel_size:
	// that many engine ranks behind the one HTTP port, rank r publishing on the event and replay
	// ports + r. 0 or 1 = one engine.
	DataParallelSize int
	// Silent workers publish no KV events; the router is still told an events and a replay
	// endpoint (Worker.KVEvents, KVReplay), which a test may bind to play the publisher.
	Silent bool
	// KVTransferFailureRate is vllm-sim --kv-transfer-failure-rate: the share of decode legs
	// whose KV read fails (docs/disagg-truth.md); 0 = none.
	KVTransferFailureRate float64
	// KVLoadFailurePolicy is the worker's kv_load_failure_policy: "" or "fail" (vLLM's
	// default: the failed leg answers an error) or "recompute".
	KVLoadFailurePolicy string
	// Sidecar puts a pd-sidecar in front of a decode worker too (llm-d's "decode first"
	// layout): the router advertises the worker at the sidecar's address, so a request Envoy
	// sends there with a prefill host runs both legs from it (the handoff placement, whose
	// prefill leg goes to another decode worker). Prefill workers always have one.
	Sidecar bool
	// Host is the loopback address the worker's HTTP servers (vllm-sim, the pd-sidecar) bind;
	// default 127.0.0.1. Give workers addresses of their own (127.0.0.x) where a test tells
	// them apart by IP, as a gateway's subset hint does.
	Host string
}

// Config describes a whole stack on loopback.
type Config struct {
	Bin       Binaries
	Dir       string // scratch directory for configs
	Tokenizer string // model directory (tokenizer.json); default tokenizer/testdata/models/qwen3
	// ModelName names the router's model (model.name, unknown_model reject): other request
	// model names get 404. "": the unnamed model takes every name.
	ModelName string
	Workers   []WorkerSpec
	// Disagg is --router-conditional-disagg-config (JSON).
	Disagg string
	// QueueThreshold is router.queue_threshold; 0 = unset.
	QueueThreshold float64
	// TimeScale runs the simulated workers this many times faster than real time.
	TimeScale float64
	// MaxBodyBytes is condisagg's body limit; 0 = its default.
	MaxBodyBytes int
	// ScrapeInterval enables the router's vLLM /metrics scrape (worker health); 0 = off.
	ScrapeInterval time.Duration
	// NoHealthProbes turns the router's /health probing (and the passive upstream signals) off:
	// for stacks whose scenarios pause workers on purpose, where a paused worker must stay
	// "busy" rather than become "gone". Default: the router's defaults (on).
	NoHealthProbes bool
	// FullDuplexEnvoy also starts a second Envoy in front of the same router with the other
	// profile: FULL_DUPLEX_STREAMED both ways, fail-closed (Envoy allows no other failure mode).
	FullDuplexEnvoy bool
	// EnvoyLog receives Envoy's output and access log; nil = kept in memory only.
	EnvoyLog *os.File
	// Replicas starts that many condisagg processes (same config, same workers; each its own
	// listeners) and makes all of them hosts of every Envoy's ext_proc cluster. 0 or 1 = one.
	// Stack.Condisagg and its addresses are the first replica; Stack.Replicas lists all.
	Replicas int
	// BookingBus starts a NATS server in this process (127.0.0.1, a token) and makes every
	// replica share its bookings through it (replicas.nats_url, lease BookingLease).
	BookingBus bool
	// BookingLease is replicas.lease with BookingBus; 0 = 3s.
	BookingLease time.Duration
	// MaxModelLen is every simulator's --max-model-len and the router's model max_model_len;
	// 0 = the simulator's default, unknown to the router.
	MaxModelLen int
	// RouterYAML is appended to the router's configuration file (top-level keys).
	RouterYAML string
	// ReplicaHosts puts the ext_proc listener of replica i on ReplicaHosts[i] (loopback
	// addresses such as 127.0.0.1 and 127.0.0.2), every replica on the same port, as pods
	// behind one headless Service are: a DNS name answered with these addresses reaches them
	// all at one port. Empty: each replica on 127.0.0.1 at a port of its own.
	ReplicaHosts []string
	// NoEnvoy starts no Envoy: the test runs one of its own (Stack.Envoy is nil).
	NoEnvoy bool
	// AccessLog writes each Envoy's access log to a file of its own, which AccessLog reads
	// back: which worker every request was sent to, and when (it replaces the access log in
	// EnvoyLog).
	AccessLog bool
}

// Worker is one running simulated worker: vllm-sim plus, for a prefill worker, its pd-sidecar
// listening on the endpoint the router advertises for it (the prefill-first layout).
type Worker struct {
	Spec     WorkerSpec
	Sim      *proc.Proc
	Sidecar  *proc.Proc // prefill workers, and decode workers with WorkerSpec.Sidecar
	SimAddr  string
	Endpoint string // the router's workers[].endpoint: the sidecar for prefill, else SimAddr
	KVEvents string // tcp://127.0.0.1:port (an unused port for a silent worker)
	KVReplay string
	simArgs  []string
}

// Stack is the whole system on 127.0.0.1.
type Stack struct {
	cfg         Config
	http        *http.Client // every request of the stack's clients; idle connections closed by Close
	Workers     []*Worker
	Condisagg   *proc.Proc
	GRPCAddr    string // ext_proc + health gRPC (Envoy)
	AdminGRPC   string // Admin gRPC (explain, workers)
	AdminAddr   string // admin HTTP
	ConfigPath  string
	Envoy       *envoy.Process // fail-open, BUFFERED (the recommended profile)
	EnvoyDuplex *envoy.Process // full duplex, fail-closed, when Config.FullDuplexEnvoy
	accessLogs  map[*envoy.Process]string
	// Replicas are every condisagg process, Replicas[0] being Condisagg (Config.Replicas).
	Replicas []*Replica
	// Bus is the NATS server the replicas share bookings through (Config.BookingBus), else nil.
	Bus          *natstest.Server
	busTokenFile string
	extProcPort  int // the port every replica's ext_proc listens on, with Config.ReplicaHosts
}

// Replica is one condisagg process of the stack and its addresses.
type Replica struct {
	Proc                           *proc.Proc
	GRPCAddr, AdminGRPC, AdminAddr string
	ConfigPath                     string
}

// startTimeout bounds the start of each process of the stack, from exec to the signal that it
// is up: its log line with its addresses, and for condisagg also /readyz, for Envoy its admin
// /ready. Every process gets its own: one 30 s budget for a whole stack ran out on two cores
// busy with -race builds and other tests at condisagg's "serving" line, the workers and
// sidecars started before it having spent it. A process that exits is reported at once; one
// that hangs fails the test after this bound.
const startTimeout = 2 * time.Minute

// Start brings the stack up: workers, sidecars, condisagg (ready), Envoy. On failure
// everything already started is stopped.
func Start(ctx context.Context, cfg Config) (st *Stack, err error) {
	if cfg.Tokenizer == "" {
		root, err := repo.Root()
		if err != nil {
			return nil, err
		}
		cfg.Tokenizer = filepath.Join(root, "tokenizer", "testdata", "models", "qwen3")
	}
	if cfg.TimeScale == 0 {
		cfg.TimeScale = 1
	}
	s := &Stack{cfg: cfg, http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}},
		accessLogs: map[*envoy.Process]string{}}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	for _, spec := range cfg.Workers {
		w, err := s.startWorker(ctx, spec)
		if err != nil {
			return nil, err
		}
		s.Workers = append(s.Workers, w)
	}
	if cfg.BookingBus {
		if err := s.startBus(); err != nil {
			return nil, err
		}
	}
	if len(cfg.ReplicaHosts) > 0 && len(cfg.ReplicaHosts) != max(cfg.Replicas, 1) {
		return nil, fmt.Errorf("e2e: %d replica hosts for %d replicas", len(cfg.ReplicaHosts), max(cfg.Replicas, 1))
	}
	if s.ConfigPath, err = s.writeRouterConfig("condisagg.yaml", 0); err != nil {
		return nil, err
	}
	for _, w := range s.Workers {
		if w.Spec.Role == Prefill || w.Spec.Sidecar {
			if err := s.startSidecar(ctx, w); err != nil {
				return nil, err
			}
		}
	}
	if err := s.startRouter(ctx); err != nil {
		return nil, err
	}
	s.Replicas = []*Replica{{Proc: s.Condisagg, GRPCAddr: s.GRPCAddr, AdminGRPC: s.AdminGRPC, AdminAddr: s.AdminAddr, ConfigPath: s.ConfigPath}}
	for i := 1; i < cfg.Replicas; i++ {
		r, err := s.startReplica(ctx, i)
		if err != nil {
			return nil, err
		}
		s.Replicas = append(s.Replicas, r)
	}
	if cfg.BookingBus {
		if err := s.waitBus(ctx); err != nil {
			return nil, err
		}
	}
	if cfg.NoEnvoy {
		return s, nil
	}
	if err := s.startEnvoys(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// startBus starts the embedded NATS server with a random token, written to a file the
// replicas' configs name.
func (s *Stack) startBus() error {
	var tok [16]byte
	_, _ = crand.Read(tok[:])
	token := hex.EncodeToString(tok[:])
	bus, err := natstest.Start(natstest.Options{Token: token})
	if err != nil {
		return err
	}
	s.Bus = bus
	s.busTokenFile = filepath.Join(s.cfg.Dir, "bus-token")
	return os.WriteFile(s.busTokenFile, []byte(token+"\n"), 0o600)
}

// waitBus waits until every replica's /readyz says its bus is connected.
func (s *Stack) waitBus(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	for _, r := range s.Replicas {
		err := Poll(ctx, func() error {
			_, body, err := s.Get(ctx, "http://"+r.AdminAddr+"/readyz")
			if err != nil {
				return err
			}
			if !strings.Contains(string(body), "replicas bus: connected") {
				return fmt.Errorf("condisagg /readyz at %s: bus not connected: %s", r.AdminAddr, body)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// LogOutputs logs the last output of every process of the stack to t: what a failed test
// needs to see.
func (s *Stack) LogOutputs(t testing.TB) {
	t.Helper()
	t.Logf("condisagg output:\n%s", s.Condisagg.Output())
	t.Logf("envoy output:\n%s", s.Envoy.Output())
	for _, w := range s.Workers {
		t.Logf("%s output:\n%s", w.Sim.Name(), w.Sim.Output())
		if w.Sidecar != nil {
			t.Logf("%s output:\n%s", w.Sidecar.Name(), w.Sidecar.Output())
		}
	}
}

// Close stops every process of the stack; it is safe to call more than once.
func (s *Stack) Close() {
	defer s.http.CloseIdleConnections()
	if s.Envoy != nil {
		_ = s.Envoy.Stop()
	}
	if s.EnvoyDuplex != nil {
		_ = s.EnvoyDuplex.Stop()
	}
	if s.Condisagg != nil {
		s.Condisagg.Stop()
	}
	for _, r := range s.Replicas {
		if r.Proc != s.Condisagg {
			r.Proc.Stop()
		}
	}
	for _, w := range s.Workers {
		if w.Sidecar != nil {
			w.Sidecar.Stop()
		}
		if w.Sim != nil {
			w.Sim.Stop()
		}
	}
	if s.Bus != nil {
		s.Bus.Stop()
		s.Bus = nil
	}
}

// Worker returns the worker named name, or nil.
func (s *Stack) Worker(name string) *Worker {
	for _, w := range s.Workers {
		if w.Spec.Name == name {
			return w
		}
	}
	return nil
}

// WorkerAt returns the worker whose router endpoint or simulator address is addr, or nil.
func (s *Stack) WorkerAt(addr string) *Worker {
	for _, w := range s.Workers {
		if w.Endpoint == addr || w.SimAddr == addr {
			return w
		}
	}
	return nil
}

func (spec WorkerSpec) host() string {
	if spec.Host == "" {
		return "127.0.0.1"
	}
	return spec.Host
}

func (s *Stack) simArgs(spec WorkerSpec, port int, events, replay string) []string {
	args := []string{"--host", spec.host(), "--port", strconv.Itoa(port), "--tokenizer", s.cfg.Tokenizer,
		"--model", "qwen3", "--time-scale", strconv.FormatFloat(s.cfg.TimeScale, 'g', -1, 64),
		"--enable-prompt-tokens-details"}
	// vLLM 0.32 deprecates kv_both: a prefill worker produces KV, a decode worker consumes it.
	kv := map[string]string{"kv_connector": "NixlConnector", "kv_role": "kv_consumer"}
	if spec.Role == Prefill {
		kv["kv_role"] = "kv_producer"
	}
	if spec.KVLoadFailurePolicy != "" {
		kv["kv_load_failure_policy"] = spec.KVLoadFailurePolicy
	}
	kvConfig, _ := json.Marshal(kv)
	args = append(args, "--kv-transfer-config", string(kvConfig))
	if spec.NumGPUBlocks > 0 {
		args = append(args, "--num-gpu-blocks", strconv.Itoa(spec.NumGPUBlocks))
	}
	if s.cfg.MaxModelLen > 0 {
		args = append(args, "--max-model-len", strconv.Itoa(s.cfg.MaxModelLen))
	}
	if spec.DataParallelSize > 1 {
		args = append(args, "--data-parallel-size", strconv.Itoa(spec.DataParallelSize))
	}
	if spec.KVTransferFailureRate > 0 {
		args = append(args, "--kv-transfer-failure-rate", strconv.FormatFloat(spec.KVTransferFailureRate, 'g', -1, 64))
	}
	if !spec.Silent {
		ev, _ := json.Marshal(map[string]any{"enable_kv_cache_events": true, "publisher": "zmq",
			"endpoint": events, "replay_endpoint": replay})
		args = append(args, "--kv-events-config", string(ev))
	}
	return args
}

func (s *Stack) startWorker(ctx context.Context, spec WorkerSpec) (*Worker, error) {
	w := &Worker{Spec: spec}
	// Fixed ports outside the kernel's and czmq's dynamic ranges, so that RestartSim can bind
	// them again: a port from either range can be taken, in the moment the killed simulator
	// frees it, by any other process binding port 0 or czmq's "*" (czmq even picks the lowest
	// free port of its range, which is exactly the one just freed).
	var ports [3]int
	for i := range ports {
		n := 1
		if i > 0 { // the event and replay ports: one per data-parallel rank
			n = max(spec.DataParallelSize, 1)
		}
		p, err := stablePortRun(n)
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	w.simArgs = s.simArgs(spec, ports[0], fixedZMQ("tcp://127.0.0.1:"+strconv.Itoa(ports[1])),
		fixedZMQ("tcp://127.0.0.1:"+strconv.Itoa(ports[2])))
	if err := s.runSim(ctx, w); err != nil {
		return nil, err
	}
	if spec.Silent {
		// Nobody publishes or answers replays there, unless a test binds these ports itself
		// (stable ones, so that it can).
		var eps [2]string
		for i := 0; i < len(eps); i++ {
			port, err := StablePort()
			if err != nil {
				return nil, err
			}
			eps[i] = "tcp://127.0.0.1:" + strconv.Itoa(port)
			if i == 1 && eps[1] == eps[0] {
				i-- // the router refuses a replay port equal to the events port
			}
		}
		w.KVEvents, w.KVReplay = eps[0], eps[1]
	}
	w.Endpoint = w.SimAddr
	if spec.Role == Prefill || spec.Sidecar {
		// A stable port too: one released from port 0 could go to any other process's bind of
		// port 0 before the sidecar binds it.
		port, err := StablePort()
		if err != nil {
			return nil, err
		}
		w.Endpoint = net.JoinHostPort(spec.host(), strconv.Itoa(port))
	}
	return w, nil
}

func (s *Stack) runSim(ctx context.Context, w *Worker) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	p, a, err := startLogging(ctx, "vllm-sim "+w.Spec.Name, "vllm-sim listening", s.cfg.Bin.VLLMSim, w.simArgs...)
	if err != nil {
		return err
	}
	w.Sim = p
	w.SimAddr, w.KVEvents, w.KVReplay = a["endpoint"], a["kv_events"], a["kv_replay"]
	return nil
}

// logLines is how many parsed log lines each process keeps: more than any of them logs
// before the line startLogging waits for.
const logLines = 4096

// startLogging starts one process of the stack and waits until it logs msg, the line that says
// it is listening and names its addresses, whose attributes it returns. If the line never
// comes, the process is stopped and the error carries its output.
func startLogging(ctx context.Context, name, msg, bin string, args ...string) (*proc.Proc, map[string]string, error) {
	p, err := proc.Start(proc.Config{Name: name, Path: bin, Args: args, LogLines: logLines})
	if err != nil {
		return nil, nil, fmt.Errorf("e2e: %w", err)
	}
	a, err := p.WaitLog(ctx, msg)
	if err != nil {
		_ = p.Stop()
		return nil, nil, fmt.Errorf("e2e: %w", err)
	}
	return p, a, nil
}

// RestartSim crashes a worker's vllm-sim (SIGKILL) and starts a new one on the same HTTP,
// KV event and replay ports: an engine restart whose event sequence starts over.
func (s *Stack) RestartSim(ctx context.Context, name string) error {
	w := s.Worker(name)
	if w == nil {
		return fmt.Errorf("e2e: restart %q: no such worker", name)
	}
	w.Sim.Kill()
	_, port, _ := net.SplitHostPort(w.SimAddr)
	n, _ := strconv.Atoi(port)
	w.simArgs = s.simArgs(w.Spec, n, fixedZMQ(w.KVEvents), fixedZMQ(w.KVReplay))
	return s.runSim(ctx, w)
}

// RestartRouter crashes condisagg (SIGKILL) unless it has already exited, and starts a new
// process on the same config. Its three listeners are pinned in that config, so both Envoys'
// ext_proc clusters and the admin clients reach the new process at the old addresses. It
// returns once the new process serves and, as at Start, is ready.
func (s *Stack) RestartRouter(ctx context.Context) error {
	s.Condisagg.Kill()
	return s.startRouter(ctx)
}

// fixedZMQ turns tcp://127.0.0.1:N into czmq's one-port range form, which vllm-sim binds
// (vLLM binds an endpoint containing '*') on exactly that loopback port.
func fixedZMQ(ep string) string {
	i := strings.LastIndexByte(ep, ':')
	return ep[:i+1] + "*[" + ep[i+1:] + "-" + ep[i+1:] + "]"
}

// writeRouterConfig writes the config of replica i (0: the first) into file.
func (s *Stack) writeRouterConfig(file string, replica int) (string, error) {
	// Stable ports, not :0, so that RestartRouter's new process listens where Envoy's ext_proc
	// cluster and the admin clients already point.
	var ports [3]int
	for i := range ports {
		p, err := StablePort()
		if err != nil {
			return "", err
		}
		ports[i] = p
	}
	host := "127.0.0.1"
	if len(s.cfg.ReplicaHosts) > 0 {
		if s.extProcPort == 0 {
			s.extProcPort = ports[0]
		}
		host, ports[0] = s.cfg.ReplicaHosts[replica], s.extProcPort
	}
	var b strings.Builder
	fmt.Fprintf(&b, "listen: %s\nadmin_listen: 127.0.0.1:%d\nadmin_grpc_listen: 127.0.0.1:%d\nfailure_mode: open\ndebug_headers: true\n",
		net.JoinHostPort(host, strconv.Itoa(ports[0])), ports[1], ports[2])
	fmt.Fprintf(&b, "drain_timeout: 5s\nunready_delay: 0s\nlog_level: info\n")
	if s.cfg.MaxBodyBytes > 0 {
		fmt.Fprintf(&b, "max_body_bytes: %d\n", s.cfg.MaxBodyBytes)
	}
	maxLen := ""
	if s.cfg.MaxModelLen > 0 {
		maxLen = fmt.Sprintf(", max_model_len: %d", s.cfg.MaxModelLen)
	}
	if s.cfg.ModelName != "" {
		fmt.Fprintf(&b, "unknown_model: reject\nmodel: {name: %q, tokenizer: %q, block_size: 16%s}\n", s.cfg.ModelName, s.cfg.Tokenizer, maxLen)
	} else {
		fmt.Fprintf(&b, "model: {tokenizer: %q, block_size: 16%s}\n", s.cfg.Tokenizer, maxLen)
	}
	b.WriteString(s.cfg.RouterYAML)
	if s.Bus != nil {
		lease := cmp.Or(s.cfg.BookingLease, 3*time.Second)
		fmt.Fprintf(&b, "replicas: {nats_url: %q, token_file: %q, id: %q, lease: %s}\n", s.Bus.URL(), s.busTokenFile,
			strings.TrimSuffix(file, ".yaml"), lease)
	}
	fmt.Fprintf(&b, "router:\n  mode: kv\n  kv_events: true\n  conditional_disagg: true\n")
	if s.cfg.Disagg != "" {
		fmt.Fprintf(&b, "  conditional_disagg_config: %q\n", s.cfg.Disagg)
	}
	if s.cfg.QueueThreshold > 0 {
		fmt.Fprintf(&b, "  queue_threshold: %g\n", s.cfg.QueueThreshold)
	}
	fmt.Fprintf(&b, "pool: {booking_ttl: 300s, sweep_interval: 30s, scrape_interval: %s", s.cfg.ScrapeInterval)
	if s.cfg.NoHealthProbes {
		b.WriteString(", health_interval: -1s")
	}
	b.WriteString("}\n")
	b.WriteString("workers:\n")
	for _, w := range s.Workers {
		fmt.Fprintf(&b, "  - {name: %s, role: %s, endpoint: %q, kv_events: %q", w.Spec.Name, w.Spec.Role, w.Endpoint, w.KVEvents)
		if w.KVReplay != "" {
			fmt.Fprintf(&b, ", kv_replay: %q", w.KVReplay)
		}
		if w.Spec.NumGPUBlocks > 0 {
			fmt.Fprintf(&b, ", num_gpu_blocks: %d", w.Spec.NumGPUBlocks)
		}
		if w.Spec.MaxNumBatchedTokens > 0 {
			fmt.Fprintf(&b, ", max_num_batched_tokens: %d", w.Spec.MaxNumBatchedTokens)
		}
		if w.Spec.DataParallelSize > 1 {
			fmt.Fprintf(&b, ", data_parallel_size: %d", w.Spec.DataParallelSize)
		}
		b.WriteString("}\n")
	}
	path := filepath.Join(s.cfg.Dir, file)
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return "", fmt.Errorf("e2e: write router config %s: %w", path, err)
	}
	return path, nil
}

// startSidecar runs the pd-sidecar of worker w (a prefill worker, or a decode worker with
// WorkerSpec.Sidecar) on w.Endpoint: Envoy's prefill route
// dials the endpoint the router advertises, and the sidecar dials the simulator behind it.
func (s *Stack) startSidecar(ctx context.Context, w *Worker) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	// Every sidecar-fronted worker's advertised endpoint is dialled at its simulator: a leg
	// for another such worker (a handoff's prefill leg on a decode worker) must reach its
	// engine, not its sidecar, which would pass it on without the NIXL parameters.
	var dial []string
	for _, o := range s.Workers {
		if o.Endpoint != o.SimAddr {
			dial = append(dial, o.Endpoint+"="+o.SimAddr)
		}
	}
	p, _, err := startLogging(ctx, "pd-sidecar "+w.Spec.Name, "pd-sidecar listening", s.cfg.Bin.PDSidecar,
		"--listen", w.Endpoint, "--admin-listen", "127.0.0.1:0", "--config", s.ConfigPath,
		"--dial", strings.Join(dial, ","), "--default-decode-host", w.SimAddr,
		"--prefill-timeout", "60s", "--drain-timeout", "2s")
	if err != nil {
		return err
	}
	w.Sidecar = p
	return nil
}

func (s *Stack) startRouter(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	p, a, err := startLogging(ctx, "condisagg", "serving", s.cfg.Bin.Condisagg, "serve", "--config", s.ConfigPath)
	if err != nil {
		return err
	}
	s.Condisagg = p
	s.GRPCAddr, s.AdminGRPC, s.AdminAddr = a["endpoint"], a["admin_grpc"], a["admin"]
	// Ready once every worker's event stream has been seen; a silent worker never is.
	if s.hasSilent() {
		return nil
	}
	return Poll(ctx, func() error { return s.ready(ctx) })
}

// startReplica starts condisagg replica i (>= 1): the first replica's config on listeners of
// its own, ready like the first.
func (s *Stack) startReplica(ctx context.Context, i int) (*Replica, error) {
	path, err := s.writeRouterConfig(fmt.Sprintf("condisagg-%d.yaml", i), i)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	p, a, err := startLogging(ctx, fmt.Sprintf("condisagg-%d", i), "serving", s.cfg.Bin.Condisagg, "serve", "--config", path)
	if err != nil {
		return nil, err
	}
	r := &Replica{Proc: p, GRPCAddr: a["endpoint"], AdminGRPC: a["admin_grpc"], AdminAddr: a["admin"], ConfigPath: path}
	if s.hasSilent() {
		return r, nil
	}
	if err := Poll(ctx, func() error { return s.readyAt(ctx, r.AdminAddr) }); err != nil {
		p.Stop()
		return nil, err
	}
	return r, nil
}

func (s *Stack) hasSilent() bool {
	for _, w := range s.Workers {
		if w.Spec.Silent {
			return true
		}
	}
	return false
}

func (s *Stack) ready(ctx context.Context) error { return s.readyAt(ctx, s.AdminAddr) }

func (s *Stack) readyAt(ctx context.Context, adminAddr string) error {
	code, body, err := s.Get(ctx, "http://"+adminAddr+"/readyz")
	if err != nil {
		return err
	}
	if code != 200 {
		return fmt.Errorf("condisagg /readyz: %d %s", code, body)
	}
	return nil
}

func (s *Stack) startEnvoys(ctx context.Context) error {
	bin, err := envoy.FindBinary()
	if err != nil {
		return err
	}
	host, port, _ := net.SplitHostPort(s.GRPCAddr)
	n, _ := strconv.Atoi(port)
	p := envoy.Params{Mode: envoy.Buffered, FailOpen: envoy.FailOpen, ExtProc: envoy.Endpoint{Host: host, Port: n},
		Proxy: envoy.Proxy{HealthCheckInterval: time.Second}}
	for _, r := range s.Replicas[1:] {
		e, err := envoy.ParseEndpoint(r.GRPCAddr)
		if err != nil {
			return err
		}
		p.ExtProcReplicas = append(p.ExtProcReplicas, e)
	}
	for _, w := range s.Workers {
		if w.Spec.Role == Decode {
			e, err := envoy.ParseEndpoint(w.SimAddr)
			if err != nil {
				return err
			}
			p.DecodeFallback = append(p.DecodeFallback, e)
		}
	}
	if s.Envoy, err = s.startEnvoy(ctx, bin, "open", p); err != nil {
		return err
	}
	if s.cfg.FullDuplexEnvoy {
		p.Mode, p.FailOpen, p.DecodeFallback = envoy.FullDuplex, envoy.FailClosed, nil
		if s.EnvoyDuplex, err = s.startEnvoy(ctx, bin, "full-duplex", p); err != nil {
			return err
		}
	}
	return nil
}

func (s *Stack) startEnvoy(ctx context.Context, bin, name string, p envoy.Params) (*envoy.Process, error) {
	dir := filepath.Join(s.cfg.Dir, "envoy-"+name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("e2e: envoy dir: %w", err)
	}
	switch {
	case s.cfg.AccessLog:
		p.AccessLogPath = filepath.Join(dir, "access.log")
	case s.cfg.EnvoyLog != nil:
		p.AccessLogPath = "/dev/stdout"
	}
	path, err := envoy.WriteBootstrap(dir, p)
	if err != nil {
		return nil, err
	}
	opts := envoy.StartOptions{StopTimeout: 3 * time.Second}
	if s.cfg.AccessLog {
		opts.FileFlushInterval = 100 * time.Millisecond // AccessLog's readers poll for their lines
	}
	if s.cfg.EnvoyLog != nil {
		opts.Output = s.cfg.EnvoyLog
	}
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	e, err := envoy.Start(ctx, bin, path, opts)
	if err != nil {
		return nil, err
	}
	if s.cfg.AccessLog {
		s.accessLogs[e] = p.AccessLogPath
	}
	return e, nil
}

// Stable ports come from [stablePortLow, stablePortHigh): below Linux's default ephemeral range
// (32768-60999) and czmq's dynamic range (49152-65535), so no process gets one by binding port 0.
const (
	stablePortLow  = 20000
	stablePortHigh = 32000
)

// StablePort returns a free loopback port that no other process is handed by an ephemeral
// bind, for a server that must be restarted on the same port.
func StablePort() (int, error) {
	var last error
	for range 64 {
		port := stablePortLow + rand.IntN(stablePortHigh-stablePortLow)
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			last = err
			continue
		}
		ln.Close()
		return port, nil
	}
	return 0, fmt.Errorf("e2e: stable port: no free port in [%d, %d): %w", stablePortLow, stablePortHigh, last)
}

// stablePortRun is StablePort for n consecutive ports (a data-parallel server's ranks use the
// event and replay ports + rank); it returns the first.
func stablePortRun(n int) (int, error) {
	if n <= 1 {
		return StablePort()
	}
	for range 64 {
		base := stablePortLow + rand.IntN(stablePortHigh-stablePortLow-n)
		free := true
		for p := base; p < base+n && free; p++ {
			ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
			if free = err == nil; free {
				ln.Close()
			}
		}
		if free {
			return base, nil
		}
	}
	return 0, fmt.Errorf("e2e: stable ports: no %d consecutive free ports in [%d, %d)", n, stablePortLow, stablePortHigh)
}

// pollInterval is the period of Poll.
const pollInterval = 25 * time.Millisecond

// Poll calls check until it returns nil or ctx ends; it is for the state of external
// processes only, and returns the last check error on timeout.
func Poll(ctx context.Context, check func() error) error {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		err := check()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("e2e: poll: %w (last: %v)", ctx.Err(), err)
		case <-t.C:
		}
	}
}
