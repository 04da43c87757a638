package config

import (
	"bytes"
	"cmp"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/condisagg/condisagg/extproc"
	"github.com/condisagg/condisagg/kvevents"
	"github.com/condisagg/condisagg/policy"
	"github.com/condisagg/condisagg/pool"
	"github.com/condisagg/condisagg/pool/kube"
)

// File is the YAML file of `condisagg serve --config` (ARCHITECTURE §4). Every field
// can be overridden by its flag.
type File struct {
	Listen          string `yaml:"listen"`
	AdminListen     string `yaml:"admin_listen"`
	AdminGRPCListen string `yaml:"admin_grpc_listen"`
	AdminTokenFile  string `yaml:"admin_token_file"`
	AdminTLSCert    string `yaml:"admin_tls_cert"`
	AdminTLSKey     string `yaml:"admin_tls_key"`
	AdminClientCA   string `yaml:"admin_client_ca"`
	TLSCert         string `yaml:"tls_cert"`
	TLSKey          string `yaml:"tls_key"`
	// TLSClientCA makes the ext_proc port require a client certificate it signs (mTLS).
	TLSClientCA string `yaml:"tls_client_ca"`
	// AllowUnauthenticatedListen lets listen be off loopback without mTLS: the operator
	// states that the network admits only the gateway (a NetworkPolicy, a firewall).
	AllowUnauthenticatedListen bool          `yaml:"allow_unauthenticated_listen"`
	MaxBodyBytes               int           `yaml:"max_body_bytes"`
	FailureMode                string        `yaml:"failure_mode"`
	DebugHeaders               bool          `yaml:"debug_headers"`
	LLMDCompat                 bool          `yaml:"llmd_compat"`
	DrainTimeout               time.Duration `yaml:"drain_timeout"`
	UnreadyDelay               time.Duration `yaml:"unready_delay"`
	LogLevel                   string        `yaml:"log_level"`
	// Resource bounds of the ext_proc listener (extproc README "Resource bounds").
	StreamIdleTimeout    time.Duration `yaml:"stream_idle_timeout"`
	DecisionQueueTimeout time.Duration `yaml:"decision_queue_timeout"`
	DecisionConcurrency  int           `yaml:"decision_concurrency"` // 0 = GOMAXPROCS; restart to change
	// The request phase as a whole, however steadily bytes come (reloadable).
	StreamRequestTimeout time.Duration `yaml:"stream_request_timeout"`
	// A decided stream's wait for response headers before its booking is released (reloadable).
	UnansweredBookingTimeout time.Duration `yaml:"unanswered_booking_timeout"`
	// Bytes every open stream holds together (reloadable).
	MaxBufferedBytes int64 `yaml:"max_buffered_bytes"`
	// ext_proc connections and streams per connection (restart to change).
	MaxConnections          int `yaml:"max_connections"`
	MaxStreamsPerConnection int `yaml:"max_streams_per_connection"`
	// MaxPretokenBytes bounds one pre-token of a prompt (0: none); a prompt with a longer one
	// is routed by load untokenized, reason long_pretoken (restart to change).
	MaxPretokenBytes int `yaml:"max_pretoken_bytes"`
	// Model is the single-model form: one model served by the top-level workers. Models is
	// the several-model form (each entry with its own name and workers); they are exclusive.
	Model  ModelFile   `yaml:"model"`
	Models []ModelFile `yaml:"models"`
	// UnknownModel is what a request for a model name no model serves gets: "reject" (404,
	// vLLM's answer) or "passthrough" (routed by load to the first model's decode workers,
	// counted). A single model without a name takes every name.
	UnknownModel string `yaml:"unknown_model"`
	Router       struct {
		Mode                    string    `yaml:"mode"`
		KVEvents                bool      `yaml:"kv_events"`
		ConditionalDisagg       bool      `yaml:"conditional_disagg"`
		ConditionalDisaggConfig yaml.Node `yaml:"conditional_disagg_config"`
		// ShadowDisaggConfig is a candidate policy object (same form as
		// conditional_disagg_config) that decides beside the live one on every request without
		// routing anything; `condisagg shadow` shows the agreement, ReloadConfig{promote_shadow}
		// makes it live.
		ShadowDisaggConfig yaml.Node `yaml:"shadow_disagg_config"`
		QueueThreshold     *float64  `yaml:"queue_threshold"`
		// KVEventsMaxMessageBytes bounds one KV event batch; 0 = kvevents.DefaultMaxPayloadBytes.
		// It is each event socket's ZMQ_MAXMSGSIZE (plus room for the topic and sequence
		// frames): libzmq drops a peer that sends more before allocating it. Restart to change.
		KVEventsMaxMessageBytes int              `yaml:"kv_events_max_message_bytes"`
		Selection               policy.Selection `yaml:",inline"`
		Silence                 policy.Silence   `yaml:",inline"`
	} `yaml:"router"`
	Pool struct {
		BookingTTL      time.Duration `yaml:"booking_ttl"`
		SweepInterval   time.Duration `yaml:"sweep_interval"`
		ResolveInterval time.Duration `yaml:"resolve_interval"`
		ScrapeInterval  time.Duration `yaml:"scrape_interval"`
		// Worker liveness (pool.Config): /health probing, on by default; health_interval < 0
		// turns it and the passive upstream signals off.
		HealthInterval   time.Duration `yaml:"health_interval"`
		HealthTimeout    time.Duration `yaml:"health_timeout"`
		HealthPath       string        `yaml:"health_path"`
		HealthFailures   int           `yaml:"health_failures"`
		HealthSuccesses  int           `yaml:"health_successes"`
		HealthBackoffMax time.Duration `yaml:"health_backoff_max"`
		UpstreamFailures int           `yaml:"upstream_failures"`
	} `yaml:"pool"`
	Workers []pool.WorkerConfig `yaml:"workers"`
	// Discovery finds workers at run time, beside (or instead of) the static workers.
	Discovery struct {
		// Kubernetes watches EndpointSlices by label selector (pool/kube).
		Kubernetes *kube.Config `yaml:"kubernetes"`
	} `yaml:"discovery"`
}

// config is the validated configuration of `serve`.
type Config struct {
	File        File   // the merged file and flags, as given
	Listen      string // ext_proc + health gRPC
	AdminListen string // admin HTTP
	AdminGRPC   string // Admin gRPC
	Admin       AdminAccess
	TLSCert     string // ext_proc port TLS
	TLSKey      string
	// TLS is the ext_proc port's TLS (nil: plaintext), with client authentication when
	// tls_client_ca is set.
	TLS           *tls.Config
	DrainTimeout  time.Duration
	UnreadyDelay  time.Duration
	LogLevel      slog.Level
	Tokenizer     string // the first model's directory
	CacheSegments int
	KVEvents      bool
	// KVEventsMaxMessageBytes is router.kv_events_max_message_bytes with its default
	// (kvzmq.Config.MaxPayloadBytes).
	KVEventsMaxMessageBytes int
	Settings                *extproc.Settings
	Pool                    pool.Config // the first model's pool
	// Models are the served models in configuration order (one for the single-model form).
	Models       []Model
	UnknownModel string // reject or passthrough
	// DecisionConcurrency is extproc.ServerOptions.DecisionConcurrency (0 = GOMAXPROCS).
	DecisionConcurrency int
	// MaxConnections bounds the ext_proc port's open connections (netutil.LimitListener);
	// MaxStreamsPerConnection is extproc.GRPCOptions.MaxConcurrentStreams.
	MaxConnections          int
	MaxStreamsPerConnection int
	// MaxPretokenBytes is route.Options.MaxPretokenBytes.
	MaxPretokenBytes int
	// Kubernetes is discovery.kubernetes with defaults (its client settings and every entry;
	// each model's entries are in Model.Discovery); nil without Kubernetes discovery.
	Kubernetes *kube.Config
}

// Flags are the command-line flags of serve; names follow Dynamo's router flags.
type Flags struct {
	FS               *flag.FlagSet
	ConfigPath       string
	routerMode       string
	kvEvents         bool
	condDisagg       bool
	condDisaggConfig string
	queueThreshold   float64
	listen           string
	adminListen      string
	adminGRPCListen  string
	adminTokenFile   string
	adminTLSCert     string
	adminTLSKey      string
	adminClientCA    string
	tokenizer        string
	blockSize        int
	failureMode      string
	debugHeaders     bool
	llmdCompat       bool
	maxBodyBytes     int
	tlsCert          string
	tlsKey           string
	drainTimeout     time.Duration
	logLevel         string
	unknownModel     string
}

func NewFlags() *Flags {
	f := &Flags{FS: flag.NewFlagSet("serve", flag.ContinueOnError)}
	fs := f.FS
	fs.StringVar(&f.ConfigPath, "config", "", "YAML configuration file (re-read on SIGHUP and when it changes)")
	fs.StringVar(&f.routerMode, "router-mode", "kv", "router mode (kv is required by conditional disaggregation)")
	fs.BoolVar(&f.kvEvents, "router-kv-events", false, "subscribe to every worker's KV events")
	fs.BoolVar(&f.condDisagg, "router-conditional-disagg", false, "enable conditional disaggregation")
	fs.StringVar(&f.condDisaggConfig, "router-conditional-disagg-config", "", "JSON policy object (conditional-disagg.md §2)")
	fs.Float64Var(&f.queueThreshold, "router-queue-threshold", 0, "prefill queue threshold (θp when prefill_busy_threshold is unset)")
	fs.StringVar(&f.listen, "listen", DefaultListen, "ext_proc gRPC address (Envoy; ext_proc and health only); off loopback it needs tls_client_ca or allow_plaintext_extproc")
	fs.StringVar(&f.adminListen, "admin-listen", "127.0.0.1:9090", "admin HTTP address (/metrics, /healthz, /readyz, /debug/explain)")
	fs.StringVar(&f.adminGRPCListen, "admin-grpc-listen", "127.0.0.1:9003", "Admin gRPC address (Explain, ListWorkers, ReloadConfig)")
	fs.StringVar(&f.adminTokenFile, "admin-token-file", "", "file holding the bearer token the Admin API requires (required off loopback unless --admin-client-ca)")
	fs.StringVar(&f.adminTLSCert, "admin-tls-cert", "", "TLS certificate of both admin listeners (with --admin-tls-key)")
	fs.StringVar(&f.adminTLSKey, "admin-tls-key", "", "TLS key of both admin listeners")
	fs.StringVar(&f.adminClientCA, "admin-client-ca", "", "CA bundle: admin clients must present a certificate it signed (mTLS)")
	fs.StringVar(&f.tokenizer, "tokenizer", "", "model directory with tokenizer.json")
	fs.IntVar(&f.blockSize, "block-size", policy.DefaultBlockSize, "KV block size in tokens (must equal the workers')")
	fs.StringVar(&f.failureMode, "failure-mode", string(extproc.FailOpen), "internal routing failure: open (least-loaded decode worker) or closed (503)")
	fs.BoolVar(&f.debugHeaders, "debug-headers", false, "add x-condisagg-decision to requests and responses")
	fs.BoolVar(&f.llmdCompat, "llmd-compat", false, "also set x-prefiller-host-port on the remote path")
	fs.IntVar(&f.maxBodyBytes, "max-body-bytes", extproc.DefaultMaxBodyBytes, "request body limit (413 above)")
	fs.StringVar(&f.tlsCert, "tls-cert", "", "TLS certificate for the gRPC port (with --tls-key)")
	fs.StringVar(&f.tlsKey, "tls-key", "", "TLS key for the gRPC port")
	fs.DurationVar(&f.drainTimeout, "drain-timeout", 15*time.Minute, "bound of the graceful drain on SIGTERM")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&f.unknownModel, "unknown-model", "reject", "a request for a model no model serves: reject (404) or passthrough (routed by load, counted)")
	return f
}

// MaxDecisionConcurrency bounds decision_concurrency: decisions beyond the cores only share them.
const MaxDecisionConcurrency = 1024

// DefaultListen is the ext_proc port's default address: loopback, so that only an Envoy on the
// same host (a sidecar, the demo) reaches it until the operator opens it on purpose.
const DefaultListen = "127.0.0.1:9002"

// Defaults of the ext_proc listener's connection bounds. Envoy opens about one connection per
// worker thread to each ext_proc host and multiplexes every request on them.
const (
	DefaultMaxConnections          = 64
	DefaultMaxStreamsPerConnection = int(extproc.DefaultMaxConcurrentStreams)
	DefaultMaxPretokenBytes        = 4096
)

// The range of router.kv_events_max_message_bytes: below 64 KiB a long prompt's BlockStored
// batch would be refused; above 256 MiB one hostile frame could cost gigabytes of memory.
const (
	MinKVEventsMessageBytes = 64 << 10
	MaxKVEventsMessageBytes = 256 << 20
)

// defaultFile is the file configuration before the YAML and the flags apply.
func defaultFile() File {
	var fc File
	fc.Listen, fc.AdminListen, fc.AdminGRPCListen = DefaultListen, "127.0.0.1:9090", "127.0.0.1:9003"
	fc.MaxBodyBytes, fc.FailureMode = extproc.DefaultMaxBodyBytes, string(extproc.FailOpen)
	fc.DrainTimeout, fc.LogLevel, fc.UnknownModel = 15*time.Minute, "info", "reject"
	fc.StreamIdleTimeout, fc.DecisionQueueTimeout = extproc.DefaultStreamIdleTimeout, extproc.DefaultDecisionQueueTimeout
	fc.StreamRequestTimeout, fc.UnansweredBookingTimeout = extproc.DefaultStreamRequestTimeout, extproc.DefaultUnansweredBookingTimeout
	fc.MaxBufferedBytes, fc.MaxConnections, fc.MaxStreamsPerConnection = extproc.DefaultMaxBufferedBytes, DefaultMaxConnections, DefaultMaxStreamsPerConnection
	fc.MaxPretokenBytes = DefaultMaxPretokenBytes
	fc.Router.Mode = "kv"
	fc.Router.Selection = policy.DefaultSelection()
	fc.Router.Silence = policy.Silence{After: policy.DefaultKVEventsSilence, MinRequests: policy.DefaultKVEventsMinRequests}
	return fc
}

// load reads the file (if any), applies the explicitly set flags and validates everything,
// returning every problem at once.
func (f *Flags) Load() (*Config, error) {
	fc := defaultFile()
	if f.ConfigPath != "" {
		data, err := os.ReadFile(f.ConfigPath)
		if err != nil {
			return nil, fmt.Errorf("config: read %s: %w", f.ConfigPath, err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		if err := dec.Decode(&fc); err != nil {
			return nil, fmt.Errorf("config: parse %s: %w", f.ConfigPath, err)
		}
		// A relative model path in the file is relative to the file.
		fc.Model.relativeTo(f.ConfigPath)
		for i := range fc.Models {
			fc.Models[i].relativeTo(f.ConfigPath)
		}
	}
	disaggJSON, err := disaggFromFile(&fc.Router.ConditionalDisaggConfig)
	if err != nil {
		return nil, err
	}
	set := map[string]bool{}
	f.FS.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	over := func(name string, apply func()) {
		if set[name] {
			apply()
		}
	}
	over("router-mode", func() { fc.Router.Mode = f.routerMode })
	over("router-kv-events", func() { fc.Router.KVEvents = f.kvEvents })
	over("router-conditional-disagg", func() { fc.Router.ConditionalDisagg = f.condDisagg })
	over("router-conditional-disagg-config", func() { disaggJSON = &f.condDisaggConfig })
	over("router-queue-threshold", func() { fc.Router.QueueThreshold = &f.queueThreshold })
	over("listen", func() { fc.Listen = f.listen })
	over("admin-listen", func() { fc.AdminListen = f.adminListen })
	over("admin-grpc-listen", func() { fc.AdminGRPCListen = f.adminGRPCListen })
	over("admin-token-file", func() { fc.AdminTokenFile = f.adminTokenFile })
	over("admin-tls-cert", func() { fc.AdminTLSCert = f.adminTLSCert })
	over("admin-tls-key", func() { fc.AdminTLSKey = f.adminTLSKey })
	over("admin-client-ca", func() { fc.AdminClientCA = f.adminClientCA })
	over("tokenizer", func() { fc.Model.Tokenizer = f.tokenizer })
	over("block-size", func() { fc.Model.BlockSize = f.blockSize })
	over("failure-mode", func() { fc.FailureMode = f.failureMode })
	over("debug-headers", func() { fc.DebugHeaders = f.debugHeaders })
	over("llmd-compat", func() { fc.LLMDCompat = f.llmdCompat })
	over("max-body-bytes", func() { fc.MaxBodyBytes = f.maxBodyBytes })
	over("tls-cert", func() { fc.TLSCert = f.tlsCert })
	over("tls-key", func() { fc.TLSKey = f.tlsKey })
	over("drain-timeout", func() { fc.DrainTimeout = f.drainTimeout })
	over("log-level", func() { fc.LogLevel = f.logLevel })
	over("unknown-model", func() { fc.UnknownModel = f.unknownModel })
	var flagErrs []error
	if len(fc.Models) > 0 {
		for _, name := range []string{"tokenizer", "block-size"} {
			if set[name] {
				flagErrs = append(flagErrs, fmt.Errorf("config: --%s: %s applies to the single-model form only; set it per model in models[]",
					name, f.FS.Lookup(name).Value))
			}
		}
	}
	c, err := validate(fc, disaggJSON)
	if len(flagErrs) > 0 {
		return nil, errors.Join(append(flagErrs, err)...)
	}
	return c, err
}

// disaggFromFile turns router.conditional_disagg_config (a mapping or a JSON string) into
// the JSON text policy.ParseDisagg reads; nil when absent.
func disaggFromFile(n *yaml.Node) (*string, error) {
	if n.Kind == 0 {
		return nil, nil
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!str" {
		return &n.Value, nil
	}
	var v any
	if err := n.Decode(&v); err != nil {
		return nil, fmt.Errorf("config: router.conditional_disagg_config: %w", err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("config: router.conditional_disagg_config: %v must be a mapping", v)
	}
	s := string(b)
	return &s, nil
}

// validate checks every field and builds the package configs.
func validate(fc File, disaggJSON *string) (*Config, error) {
	var errs []error
	bad := func(field string, value any, rule string) {
		errs = append(errs, fmt.Errorf("config: %s: %v %s", field, value, rule))
	}
	c := &Config{File: fc, Listen: fc.Listen, AdminListen: fc.AdminListen, AdminGRPC: fc.AdminGRPCListen,
		TLSCert: fc.TLSCert, TLSKey: fc.TLSKey,
		DrainTimeout: fc.DrainTimeout, UnreadyDelay: fc.UnreadyDelay, KVEvents: fc.Router.KVEvents,
		UnknownModel: fc.UnknownModel, DecisionConcurrency: fc.DecisionConcurrency,
		MaxConnections: fc.MaxConnections, MaxStreamsPerConnection: fc.MaxStreamsPerConnection, MaxPretokenBytes: fc.MaxPretokenBytes}
	if fc.Listen == "" {
		bad("listen", `""`, "must be host:port")
	}
	if fc.UnknownModel != "reject" && fc.UnknownModel != "passthrough" {
		bad("unknown_model", strconv.Quote(fc.UnknownModel), "must be reject or passthrough")
	}
	var err error
	if c.Admin, err = loadAdminAccess(fc); err != nil {
		errs = append(errs, err)
	}
	if (fc.TLSCert == "") != (fc.TLSKey == "") {
		bad("tls_cert/tls_key", fc.TLSCert+"/"+fc.TLSKey, "must be given together")
	}
	c.TLS = extProcTLS(fc, bad)
	checkListenAccess(fc, c.TLS, bad)
	if fc.DrainTimeout <= 0 {
		bad("drain_timeout", fc.DrainTimeout, "must be > 0")
	}
	if fc.UnreadyDelay < 0 {
		bad("unready_delay", fc.UnreadyDelay, "must be >= 0")
	}
	if err := c.LogLevel.UnmarshalText([]byte(fc.LogLevel)); err != nil {
		bad("log_level", fc.LogLevel, "must be one of debug, info, warn, error")
	}
	if fc.StreamIdleTimeout == 0 {
		bad("stream_idle_timeout", "0s", fmt.Sprintf("is outside [%s, %s]", extproc.MinStreamIdleTimeout, extproc.MaxStreamIdleTimeout))
	}
	if fc.DecisionQueueTimeout == 0 {
		bad("decision_queue_timeout", "0s", fmt.Sprintf("is outside [%s, %s]", extproc.MinDecisionQueueTimeout, extproc.MaxDecisionQueueTimeout))
	}
	c.KVEventsMaxMessageBytes = cmp.Or(fc.Router.KVEventsMaxMessageBytes, kvevents.DefaultMaxPayloadBytes)
	if m := c.KVEventsMaxMessageBytes; m < MinKVEventsMessageBytes || m > MaxKVEventsMessageBytes {
		bad("router.kv_events_max_message_bytes", m, fmt.Sprintf("is outside [%d, %d] (0 = %d)",
			MinKVEventsMessageBytes, MaxKVEventsMessageBytes, kvevents.DefaultMaxPayloadBytes))
	}
	checkListenerBounds(fc, bad)
	if fc.DecisionConcurrency < 0 || fc.DecisionConcurrency > MaxDecisionConcurrency {
		bad("decision_concurrency", fc.DecisionConcurrency, fmt.Sprintf("is outside [0, %d] (0 = GOMAXPROCS)", MaxDecisionConcurrency))
	}
	mfs, prefixes, err := modelsOf(fc)
	errs = append(errs, err)
	mfs = withModelDefaults(mfs)
	disc, kc := discoveryOf(fc, mfs, len(fc.Models) > 0, &errs)
	c.Kubernetes = kc
	pc, err := policyConfig(fc, mfs, disc, disaggJSON)
	errs = append(errs, err)
	shadow, err := shadowConfig(fc, pc)
	errs = append(errs, err)
	for _, c := range []*policy.Config{&pc, shadow} {
		if c != nil && c.Disagg.DecodeBusySource == policy.BusySourceReported && fc.Pool.ScrapeInterval <= 0 {
			bad("decode_busy_source", `"reported"`, "needs pool.scrape_interval > 0: the workers' /metrics report the KV usage")
			break
		}
	}
	c.Settings = &extproc.Settings{Policy: &pc, Shadow: shadow, MaxBodyBytes: fc.MaxBodyBytes,
		FailureMode: extproc.FailureMode(fc.FailureMode), DebugHeaders: fc.DebugHeaders, LLMDCompat: fc.LLMDCompat,
		StreamIdleTimeout: fc.StreamIdleTimeout, DecisionQueueTimeout: fc.DecisionQueueTimeout,
		StreamRequestTimeout: fc.StreamRequestTimeout, UnansweredBookingTimeout: fc.UnansweredBookingTimeout, MaxBufferedBytes: fc.MaxBufferedBytes}
	errs = append(errs, c.Settings.Validate())
	c.Models = buildModels(fc, mfs, prefixes, disc, &errs)
	if len(c.Models) > 0 {
		c.Tokenizer, c.CacheSegments, c.Pool = c.Models[0].Tokenizer, c.Models[0].CacheSegments, c.Models[0].Pool
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return c, nil
}

// poolConfig is the pool section with one model's workers and block size.
func poolConfig(fc *File, workers []pool.WorkerConfig, blockSize int) pool.Config {
	return pool.Config{Workers: workers, BlockSize: blockSize, BookingTTL: fc.Pool.BookingTTL,
		SweepInterval: fc.Pool.SweepInterval, ResolveInterval: fc.Pool.ResolveInterval, ScrapeInterval: fc.Pool.ScrapeInterval,
		HealthInterval: fc.Pool.HealthInterval, HealthTimeout: fc.Pool.HealthTimeout, HealthPath: fc.Pool.HealthPath,
		HealthFailures: fc.Pool.HealthFailures, HealthSuccesses: fc.Pool.HealthSuccesses,
		HealthBackoffMax: fc.Pool.HealthBackoffMax, UpstreamFailures: fc.Pool.UpstreamFailures}
}

// policyConfig builds and validates the policy configuration; its block size is the first
// model's (route gives each model a copy with its own).
func policyConfig(fc File, models []ModelFile, disc [][]kube.Entry, disaggJSON *string) (policy.Config, error) {
	pc := policy.DefaultConfig()
	pc.Enabled, pc.RouterMode, pc.KVEvents = fc.Router.ConditionalDisagg, fc.Router.Mode, fc.Router.KVEvents
	pc.Selection, pc.Silence = fc.Router.Selection, fc.Router.Silence
	var all []pool.WorkerConfig
	for i, m := range models {
		if i == 0 {
			pc.BlockSize = m.BlockSize
		}
		all = append(all, m.Workers...)
		all = append(all, discoveredRoles(disc[i])...)
	}
	pc.DistinctPools = distinctPools(all)
	if fc.Router.QueueThreshold != nil {
		pc.QueueThreshold = policy.Set(*fc.Router.QueueThreshold)
	}
	var errs []error
	if disaggJSON != nil {
		pc.DisaggGiven = true
		d, err := policy.ParseDisagg([]byte(*disaggJSON))
		if err != nil {
			errs = append(errs, err)
		} else {
			pc.Disagg = d
		}
	}
	if len(errs) == 0 {
		errs = append(errs, pc.Validate())
	}
	return pc, errors.Join(errs...)
}

// shadowConfig is the live policy config with router.shadow_disagg_config's policy object in
// place of the live one (nil when absent).
func shadowConfig(fc File, live policy.Config) (*policy.Config, error) {
	n := fc.Router.ShadowDisaggConfig
	if n.Kind == 0 {
		return nil, nil
	}
	js, err := disaggFromFile(&n)
	if err != nil {
		return nil, errors.New(strings.Replace(err.Error(), "conditional_disagg_config", "shadow_disagg_config", 1))
	}
	d, err := policy.ParseDisagg([]byte(*js))
	if err != nil {
		return nil, fmt.Errorf("config: router.shadow_disagg_config: %w", err)
	}
	c := live
	c.Enabled, c.DisaggGiven, c.Disagg = true, true, d
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("config: router.shadow_disagg_config: %w", err)
	}
	return &c, nil
}

// distinctPools: both pools are configured and no endpoint serves both roles.
func distinctPools(ws []pool.WorkerConfig) bool {
	roles := map[string]pool.Role{}
	var decode, prefill bool
	for _, w := range ws {
		ep := strings.ToLower(w.Endpoint)
		if r, ok := roles[ep]; ok && r != w.Role {
			return false
		}
		roles[ep] = w.Role
		decode = decode || w.Role == pool.RoleDecode
		prefill = prefill || w.Role == pool.RolePrefill
	}
	return decode && prefill
}
