package pool

import (
	"cmp"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Role is a worker's part in prefill/decode disaggregation.
type Role string

const (
	RolePrefill Role = "prefill"
	RoleDecode  Role = "decode"
)

// Defaults of Config (conditional-disagg.md §2, accounting knobs).
const (
	DefaultBookingTTL      = 300 * time.Second
	DefaultSweepInterval   = 30 * time.Second
	DefaultResolveInterval = 30 * time.Second
	DefaultScrapeTimeout   = 2 * time.Second
	DefaultUnhealthyAfter  = 3
	DefaultBlockSize       = 16
	DefaultMetricsPath     = "/metrics"

	// Health defaults detect a worker whose port refuses connections within about
	// HealthFailures × HealthInterval (1 s) and one that hangs within that plus HealthTimeout
	// (1.4 s): under the 2 s a dead decode worker may keep receiving traffic.
	DefaultHealthInterval   = 500 * time.Millisecond
	DefaultHealthTimeout    = 400 * time.Millisecond
	DefaultHealthPath       = "/health"
	DefaultHealthFailures   = 2
	DefaultHealthSuccesses  = 2
	DefaultHealthBackoffMax = 8 * time.Second
	DefaultUpstreamFailures = 3
	// DefaultMaxPeerBookings bounds peer bookings: 65536 open requests of other replicas
	// (each holds at most its prompt's keys, as a local booking does).
	DefaultMaxPeerBookings = 65536

	// maxHealthSuccesses bounds HealthSuccesses so flapping growth (×8) stays bounded too.
	maxHealthSuccesses = 16
)

// WorkerConfig is one entry of the `workers:` list of the YAML config (ARCHITECTURE §4).
//
// Endpoint is host:port. A literal IP registers one worker named Name. A DNS name is resolved
// on every ResolveInterval and registers one worker per address, named "Name@ip:port", so a
// Kubernetes headless Service works; a KVEvents/KVReplay URL whose host equals the endpoint's
// DNS name is rewritten to the resolved address.
type WorkerConfig struct {
	Name     string `yaml:"name"`
	Role     Role   `yaml:"role"`
	Endpoint string `yaml:"endpoint"`
	KVEvents string `yaml:"kv_events"`
	KVReplay string `yaml:"kv_replay"`
	// NumGPUBlocks is kvcap: the worker's total KV blocks. 0 = learn it from vLLM's
	// vllm:cache_config_info by scraping; unknown capacity denies guarded bypasses.
	NumGPUBlocks int64 `yaml:"num_gpu_blocks"`
	// MaxNumBatchedTokens is mnbt. 0 = learn it by scraping; unknown counts as 10,000,000.
	MaxNumBatchedTokens int64 `yaml:"max_num_batched_tokens"`
	// DataParallelSize is vLLM's --data-parallel-size (SGLang's --dp-size) of the server at Endpoint: one HTTP
	// server in front of that many engines (ranks). Each rank is its own worker (README
	// "Data-parallel ranks"): id "<id>/dp<rank>" for ranks > 0, its own KV event stream at
	// KVEvents and KVReplay with the port + rank (vLLM's offset_endpoint_port), its own load
	// and capacity (num_gpu_blocks and max_num_batched_tokens are per rank, as vLLM reports
	// them per engine), and requests are pinned to it with X-data-parallel-rank. 0 or 1 = no
	// data parallelism: one worker, no rank header.
	DataParallelSize int `yaml:"data_parallel_size"`
	// Engine is the serving engine behind Endpoint: "vllm" (default), "sglang" or
	// "trtllm-dynamo" (TensorRT-LLM behind Dynamo). It decides how the router talks to the
	// engine beyond its KV events (which every engine publishes in a format the decoder reads):
	// the prefix-cache reset, and which roles it may take (README "Engines").
	Engine EngineKind `yaml:"engine"`
}

// EngineKind is WorkerConfig.Engine.
type EngineKind string

const (
	EngineVLLM         EngineKind = "vllm"
	EngineSGLang       EngineKind = "sglang"
	EngineTRTLLMDynamo EngineKind = "trtllm-dynamo"
)

// Kind is the engine, with "" read as vLLM.
func (k EngineKind) Kind() EngineKind {
	if k == "" {
		return EngineVLLM
	}
	return k
}

// MaxDataParallelSize bounds DataParallelSize (vLLM's ports and the per-worker metric label
// sets grow with it).
const MaxDataParallelSize = 1024

// ranks is the number of workers the entry registers per address.
func (w WorkerConfig) ranks() int { return max(w.DataParallelSize, 1) }

// Config is the pool's validated configuration. Zero durations take the defaults above.
type Config struct {
	Workers []WorkerConfig
	// BlockSize is --block-size in tokens: the partial tail block of a prompt is one extra block.
	BlockSize int
	// Speculative is the model's speculative setting: SpeculativeEagle when its SGLang workers
	// run EAGLE speculative decoding (their radix cache keys pages by token bigrams, and the
	// model's KV index with them), "" otherwise. The shell checks it against each SGLang
	// server's --speculative-algorithm (CheckSGLang).
	Speculative string
	// BookingTTL releases bookings whose response was never observed (§5.2).
	BookingTTL time.Duration
	// SweepInterval is how often the shell (pool/probe) expires stale bookings.
	SweepInterval time.Duration
	// ResolveInterval is how often the shell (pool/probe) re-resolves DNS endpoints.
	ResolveInterval time.Duration
	// ScrapeInterval enables the vLLM /metrics scrape when > 0 (off by default).
	ScrapeInterval time.Duration
	// ScrapeTimeout bounds one scrape of one worker.
	ScrapeTimeout time.Duration
	// UnhealthyAfter consecutive failed scrapes mark a worker unhealthy (excluded from selection).
	UnhealthyAfter int
	// MetricsPath is the scraped HTTP path on every worker's endpoint.
	MetricsPath string

	// Health probing (README "Health"). HealthInterval is how often pool/probe probes every healthy
	// worker's HealthPath; 0 takes the default, < 0 turns probing off, and with it the passive
	// signals of ReportUpstream (nothing could bring a worker they excluded back).
	HealthInterval time.Duration
	// HealthTimeout bounds one probe; a probe without an answer by then is a failure.
	HealthTimeout time.Duration
	// HealthPath is the probed HTTP path; any 2xx answer is healthy (vLLM answers 200).
	HealthPath string
	// HealthFailures consecutive failed probes exclude a worker.
	HealthFailures int
	// HealthSuccesses consecutive good probes bring an excluded worker back; a worker that
	// flaps needs twice as many each time, up to 8×.
	HealthSuccesses int
	// HealthBackoffMax caps the probe interval of an excluded worker, which doubles from
	// HealthInterval after each failed probe.
	HealthBackoffMax time.Duration
	// UpstreamFailures consecutive failures seen in the response phase (connect failure or
	// status >= 500, via ReportUpstream) exclude a worker at once.
	UpstreamFailures int
	// MaxPeerBookings bounds the bookings other router replicas made that this pool counts
	// (ApplyPeer); a peer booking past it is refused with ErrPeerBookingsFull and counted.
	MaxPeerBookings int
}

func (c Config) withDefaults() Config {
	c.MaxPeerBookings = cmp.Or(c.MaxPeerBookings, DefaultMaxPeerBookings)
	c.BlockSize = cmp.Or(c.BlockSize, DefaultBlockSize)
	c.BookingTTL = cmp.Or(c.BookingTTL, DefaultBookingTTL)
	c.SweepInterval = cmp.Or(c.SweepInterval, DefaultSweepInterval)
	c.ResolveInterval = cmp.Or(c.ResolveInterval, DefaultResolveInterval)
	c.ScrapeTimeout = cmp.Or(c.ScrapeTimeout, DefaultScrapeTimeout)
	c.UnhealthyAfter = cmp.Or(c.UnhealthyAfter, DefaultUnhealthyAfter)
	c.MetricsPath = cmp.Or(c.MetricsPath, DefaultMetricsPath)
	c.HealthInterval = cmp.Or(c.HealthInterval, DefaultHealthInterval)
	c.HealthTimeout = cmp.Or(c.HealthTimeout, DefaultHealthTimeout)
	c.HealthPath = cmp.Or(c.HealthPath, DefaultHealthPath)
	c.HealthFailures = cmp.Or(c.HealthFailures, DefaultHealthFailures)
	c.HealthSuccesses = cmp.Or(c.HealthSuccesses, DefaultHealthSuccesses)
	c.HealthBackoffMax = cmp.Or(c.HealthBackoffMax, DefaultHealthBackoffMax)
	c.UpstreamFailures = cmp.Or(c.UpstreamFailures, DefaultUpstreamFailures)
	return c
}

// Validate returns every problem of c (after defaults), joined, each in the field/value/rule form.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	bad := func(field, value, rule string) {
		errs = append(errs, fmt.Errorf("pool config: %s: %s %s", field, value, rule))
	}
	if c.BlockSize < 1 {
		bad("block_size", strconv.Itoa(c.BlockSize), "must be >= 1")
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"booking_ttl", c.BookingTTL}, {"sweep_interval", c.SweepInterval}, {"resolve_interval", c.ResolveInterval}, {"scrape_timeout", c.ScrapeTimeout}} {
		if d.v < 0 {
			bad(d.name, d.v.String(), "must be > 0")
		}
	}
	if c.ScrapeInterval < 0 {
		bad("scrape_interval", c.ScrapeInterval.String(), "must be >= 0")
	}
	if c.MaxPeerBookings < 0 {
		bad("max_peer_bookings", strconv.Itoa(c.MaxPeerBookings), "must be >= 0 (0 = 65536)")
	}
	if c.UnhealthyAfter < 0 {
		bad("unhealthy_after", strconv.Itoa(c.UnhealthyAfter), "must be >= 0")
	}
	if !strings.HasPrefix(c.MetricsPath, "/") {
		bad("metrics_path", strconv.Quote(c.MetricsPath), "must start with /")
	}
	errs = append(errs, c.validateHealth()...)
	names := make(map[string]bool, len(c.Workers))
	for i, w := range c.Workers {
		errs = append(errs, w.validate(i, names)...)
	}
	return errors.Join(errs...)
}

// validateHealth checks the health knobs; they are checked even with probing off, so turning
// it back on cannot surface an old mistake.
func (c Config) validateHealth() []error {
	var errs []error
	bad := func(field, value, rule string) {
		errs = append(errs, fmt.Errorf("pool config: %s: %s %s", field, value, rule))
	}
	if c.HealthTimeout < 0 {
		bad("health_timeout", c.HealthTimeout.String(), "must be > 0")
	}
	if !strings.HasPrefix(c.HealthPath, "/") {
		bad("health_path", strconv.Quote(c.HealthPath), "must start with /")
	}
	if c.HealthFailures < 0 {
		bad("health_failures", strconv.Itoa(c.HealthFailures), "must be >= 1")
	}
	if c.HealthSuccesses < 0 || c.HealthSuccesses > maxHealthSuccesses {
		bad("health_successes", strconv.Itoa(c.HealthSuccesses), "must be in [1, "+strconv.Itoa(maxHealthSuccesses)+"]")
	}
	if c.HealthBackoffMax < 0 {
		bad("health_backoff_max", c.HealthBackoffMax.String(), "must be > 0")
	} else if c.HealthInterval > 0 && c.HealthBackoffMax < c.HealthInterval {
		bad("health_backoff_max", c.HealthBackoffMax.String(), "must be >= health_interval "+c.HealthInterval.String())
	}
	if c.UpstreamFailures < 0 {
		bad("upstream_failures", strconv.Itoa(c.UpstreamFailures), "must be >= 1")
	}
	return errs
}

// Probing reports whether workers' health is probed (HealthInterval > 0): pool/probe probes
// only then, and passive signals count only while it does.
func (c Config) Probing() bool { return c.HealthInterval > 0 }

func (w WorkerConfig) validate(i int, names map[string]bool) []error {
	var errs []error
	bad := func(field, value, rule string) {
		errs = append(errs, fmt.Errorf("pool config: workers[%d].%s: %s %s", i, field, value, rule))
	}
	switch {
	case w.Name == "":
		bad("name", `""`, "must not be empty")
	case strings.ContainsAny(w.Name, "@/ \t\n"):
		bad("name", strconv.Quote(w.Name), "must not contain '@', '/' or spaces ('/dp<rank>' names data-parallel ranks)")
	case names[w.Name]:
		bad("name", strconv.Quote(w.Name), "is a duplicate")
	}
	names[w.Name] = true
	if w.Role != RolePrefill && w.Role != RoleDecode {
		bad("role", strconv.Quote(string(w.Role)), "must be one of prefill, decode")
	}
	if host, port, ok := splitHostPort(w.Endpoint); !ok || host == "" || !validPort(port) {
		bad("endpoint", strconv.Quote(w.Endpoint), "must be host:port")
	}
	if w.DataParallelSize < 0 || w.DataParallelSize > MaxDataParallelSize {
		bad("data_parallel_size", strconv.Itoa(w.DataParallelSize),
			"must be in [1, "+strconv.Itoa(MaxDataParallelSize)+"] (vLLM --data-parallel-size; 0 means 1)")
	}
	w.validateEventURLs(bad)
	if w.NumGPUBlocks < 0 {
		bad("num_gpu_blocks", strconv.FormatInt(w.NumGPUBlocks, 10), "must be >= 0")
	}
	if w.MaxNumBatchedTokens < 0 {
		bad("max_num_batched_tokens", strconv.FormatInt(w.MaxNumBatchedTokens, 10), "must be >= 0")
	}
	switch k := w.Engine.Kind(); {
	case k != EngineVLLM && k != EngineSGLang && k != EngineTRTLLMDynamo:
		bad("engine", strconv.Quote(string(w.Engine)), "must be one of vllm, sglang, trtllm-dynamo")
	case k != EngineVLLM && w.Role == RolePrefill:
		// A remote prefill goes through pd-sidecar, which speaks vLLM's NixlConnector
		// kv_transfer_params only.
		bad("engine", string(k), "cannot serve role prefill yet: remote prefill speaks vLLM's NixlConnector only; "+
			"run this engine as a decode worker (it then prefills locally) or use vLLM for the prefill pool")
	case k == EngineTRTLLMDynamo && w.DataParallelSize > 1:
		// vLLM and SGLang both read X-Data-Parallel-Rank on their OpenAI routes and offset the KV
		// event ports by the rank; a TRT-LLM worker behind Dynamo has neither.
		bad("engine", string(k), "does not take data_parallel_size yet: X-Data-Parallel-Rank is read by vLLM and SGLang only; list each rank as its own worker")
	}
	return errs
}

// validateEventURLs checks kv_events and kv_replay, and that the port ranges vLLM derives from
// them for the data-parallel ranks (port .. port+size-1 each) fit and do not collide
// (vllm-kv-events.md §1.3).
func (w WorkerConfig) validateEventURLs(bad func(field, value, rule string)) {
	n := w.ranks()
	type ep struct {
		field, v, host string
		port           int
	}
	var eps []ep
	for _, u := range []struct{ field, v string }{{"kv_events", w.KVEvents}, {"kv_replay", w.KVReplay}} {
		if u.v == "" {
			continue
		}
		pu, err := url.Parse(u.v)
		if err != nil || pu.Scheme != "tcp" || pu.Host == "" {
			bad(u.field, strconv.Quote(u.v), "must be tcp://host:port")
			continue
		}
		port, err := strconv.Atoi(pu.Port())
		if err != nil || port < 1 || port > 65535 {
			bad(u.field, strconv.Quote(u.v), "must be tcp://host:port with a port in [1, 65535]")
			continue
		}
		if port+n-1 > 65535 {
			bad(u.field, strconv.Quote(u.v), fmt.Sprintf("port + data_parallel_size-1 = %d exceeds 65535 (rank r uses port + r)", port+n-1))
			continue
		}
		eps = append(eps, ep{u.field, u.v, pu.Hostname(), port})
	}
	switch {
	case len(eps) < 2 || !strings.EqualFold(eps[0].host, eps[1].host) ||
		eps[0].port >= eps[1].port+n || eps[1].port >= eps[0].port+n:
	case n == 1:
		bad("kv_replay", strconv.Quote(w.KVReplay), "uses the kv_events port: the PUB and the replay ROUTER cannot share a port")
	default:
		bad("kv_replay", strconv.Quote(w.KVReplay), fmt.Sprintf(
			"ports %d-%d overlap kv_events ports %d-%d: vLLM offsets both by the data-parallel rank, so use a replay port >= %d (or <= %d)",
			eps[1].port, eps[1].port+n-1, eps[0].port, eps[0].port+n-1, eps[0].port+n, eps[0].port-n))
	}
}

// offsetPort is vLLM's offset_endpoint_port for a validated tcp://host:port URL: rank 0
// unchanged, else the port (the text after the last ':') + rank. "" stays "".
func offsetPort(raw string, rank int) string {
	if raw == "" || rank == 0 {
		return raw
	}
	i := strings.LastIndexByte(raw, ':')
	port, err := strconv.Atoi(raw[i+1:])
	if i < 0 || err != nil {
		return raw // not reached for a validated URL
	}
	return raw[:i+1] + strconv.Itoa(port+rank)
}

func validPort(p string) bool {
	n, err := strconv.Atoi(p)
	return err == nil && n > 0 && n < 65536
}
