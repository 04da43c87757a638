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
	"path/filepath"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/condisagg/condisagg/cost"
	"github.com/condisagg/condisagg/extproc"
	"github.com/condisagg/condisagg/kvevents"
	"github.com/condisagg/condisagg/policy"
	"github.com/condisagg/condisagg/pool"
	"github.com/condisagg/condisagg/pool/kube"
)

// File is the YAML file of `condisagg serve --config` (ARCHITECTURE §4), merged with the
// flags. Its scalar settings are stated in the settings table (settings.go: key, flag, default,
// help, rule); the YAML keys are the struct tags. Load normalises the single-model form
// (model + top-level workers) into a one-entry Models, so Model and Workers are empty after it.
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
	TLSClientCA     string `yaml:"tls_client_ca"`
	// AllowUnauthenticatedListen is the operator's statement that the network admits only the
	// gateway (a NetworkPolicy, a firewall).
	AllowUnauthenticatedListen bool          `yaml:"allow_unauthenticated_listen"`
	MaxBodyBytes               int           `yaml:"max_body_bytes"`
	FailureMode                string        `yaml:"failure_mode"`
	DebugHeaders               bool          `yaml:"debug_headers"`
	LLMDCompat                 bool          `yaml:"llmd_compat"`
	DrainTimeout               time.Duration `yaml:"drain_timeout"`
	UnreadyDelay               time.Duration `yaml:"unready_delay"`
	LogLevel                   string        `yaml:"log_level"`
	// Resource bounds of the ext_proc listener (extproc README "Resource bounds").
	StreamIdleTimeout        time.Duration `yaml:"stream_idle_timeout"`
	DecisionQueueTimeout     time.Duration `yaml:"decision_queue_timeout"`
	DecisionConcurrency      int           `yaml:"decision_concurrency"`
	StreamRequestTimeout     time.Duration `yaml:"stream_request_timeout"`
	UnansweredBookingTimeout time.Duration `yaml:"unanswered_booking_timeout"`
	MaxBufferedBytes         int64         `yaml:"max_buffered_bytes"`
	MaxConnections           int           `yaml:"max_connections"`
	MaxStreamsPerConnection  int           `yaml:"max_streams_per_connection"`
	MaxPretokenBytes         int           `yaml:"max_pretoken_bytes"`
	// Model is the single-model form: one model served by the top-level workers. Models is
	// the several-model form (each entry with its own name and workers); they are exclusive.
	Model  ModelFile   `yaml:"model,omitempty"`
	Models []ModelFile `yaml:"models"`
	// UnknownModel: a single model without a name takes every name, so it applies only to
	// named models.
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
		// CostModelFile is a model file of `condisagg calibrate`: the cost model of every slo
		// policy object (live and shadow) that names no cost_model. Load reads and validates it.
		CostModelFile string `yaml:"cost_model_file"`
		// KVEventsMaxMessageBytes is each event socket's ZMQ_MAXMSGSIZE (plus room for the
		// topic and sequence frames): libzmq drops a peer that sends more before allocating it.
		KVEventsMaxMessageBytes int `yaml:"kv_events_max_message_bytes"`
		// KVEventsBind is the endpoint of one SUB socket the router binds for publishers that
		// dial out (llm-d's inference simulator, engines behind NAT); KVEventsTopics maps their
		// topics to workers. "" binds nothing (every stream connects to its worker's kv_events).
		KVEventsBind   string           `yaml:"kv_events_bind"`
		KVEventsTopics []BoundStream    `yaml:"kv_events_topics"`
		Selection      policy.Selection `yaml:",inline"`
		Silence        policy.Silence   `yaml:",inline"`
	} `yaml:"router"`
	Pool struct {
		BookingTTL      time.Duration `yaml:"booking_ttl"`
		SweepInterval   time.Duration `yaml:"sweep_interval"`
		ResolveInterval time.Duration `yaml:"resolve_interval"`
		ScrapeInterval  time.Duration `yaml:"scrape_interval"`
		// Worker liveness (pool.Config).
		HealthInterval   time.Duration `yaml:"health_interval"`
		HealthTimeout    time.Duration `yaml:"health_timeout"`
		HealthPath       string        `yaml:"health_path"`
		HealthFailures   int           `yaml:"health_failures"`
		HealthSuccesses  int           `yaml:"health_successes"`
		HealthBackoffMax time.Duration `yaml:"health_backoff_max"`
		UpstreamFailures int           `yaml:"upstream_failures"`
	} `yaml:"pool"`
	// Session is soft session affinity (route.SessionConfig) and the headers that name a
	// session (extproc.Settings.SessionHeaders).
	Session struct {
		Affinity    bool          `yaml:"affinity"`
		Headers     string        `yaml:"headers"` // comma-separated, in order of precedence
		TTL         time.Duration `yaml:"ttl"`
		MaxSessions int           `yaml:"max_sessions"`
	} `yaml:"session"`
	Workers []pool.WorkerConfig `yaml:"workers,omitempty"`
	// Replicas is the bus that shares booked load between router replicas (replicas.go).
	Replicas ReplicasFile `yaml:"replicas"`
	// Discovery finds workers at run time, beside (or instead of) the static workers.
	Discovery struct {
		// Kubernetes watches EndpointSlices by label selector (pool/kube).
		Kubernetes *kube.Config `yaml:"kubernetes"`
	} `yaml:"discovery"`
	// single records that the file used the single-model form (errors name "model" and
	// "workers" rather than "models[i]"; the one model may be unnamed).
	single bool
}

// Config is the validated configuration of `serve`: the file merged with the flags (File,
// whose settings it reads directly: c.Listen, c.DrainTimeout, ...) and what validation builds
// from it. Models and LogLevel are the validated forms of the file's fields of the same names
// (c.File.Models, c.File.LogLevel).
type Config struct {
	File
	Admin AdminAccess
	// TLS is the ext_proc port's TLS (nil: plaintext), with client authentication when
	// tls_client_ca is set.
	TLS      *tls.Config
	LogLevel slog.Level
	// KVEventsMaxMessageBytes is router.kv_events_max_message_bytes with its default
	// (kvzmq.Config.MaxPayloadBytes).
	KVEventsMaxMessageBytes int
	Settings                *extproc.Settings
	// Models are the served models in configuration order (one for the single-model form).
	Models []Model
	// BoundEvents is the bound KV event socket and its streams per model; nil when
	// router.kv_events_bind is unset.
	BoundEvents *BoundEvents
	// Kubernetes is discovery.kubernetes with defaults (its client settings and every entry;
	// each model's entries are in Model.Discovery); nil without Kubernetes discovery.
	Kubernetes *kube.Config
}

// Flags are the command-line flags of serve: --config and one flag per setting of the table
// that has one (Dynamo's router flags among them).
type Flags struct {
	FS         *flag.FlagSet
	ConfigPath string
	given      File // the flags' values, in the fields where their settings land
}

// NewFlags defines --config and the settings' flags on a new flag set.
func NewFlags() *Flags {
	f := &Flags{FS: flag.NewFlagSet("serve", flag.ContinueOnError)}
	f.FS.StringVar(&f.ConfigPath, "config", "", "YAML configuration file (re-read on SIGHUP and when it changes)")
	addFlags(f.FS, &f.given)
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

// Load reads the file (if any), applies the explicitly set flags and validates everything,
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
		if p := fc.Router.CostModelFile; p != "" && !filepath.IsAbs(p) {
			fc.Router.CostModelFile = filepath.Join(filepath.Dir(f.ConfigPath), p)
		}
	}
	applyFlags(f.FS, &f.given, &fc)
	var flagErrs []error
	if len(fc.Models) > 0 {
		f.FS.Visit(func(fl *flag.Flag) {
			if s := flagSetting(fl.Name); s != nil && s.singleModelOnly() {
				flagErrs = append(flagErrs, fmt.Errorf("config: --%s: %s applies to the single-model form only; set it per model in models[]",
					fl.Name, fl.Value))
			}
		})
	}
	disaggJSON, err := disaggFromFile(&fc.Router.ConditionalDisaggConfig)
	if err != nil {
		return nil, err
	}
	costFile, err := readCostModelFile(fc.Router.CostModelFile)
	c, verr := validate(fc, disaggJSON, costFile)
	err = errors.Join(err, verr)
	if err != nil {
		c = nil
	}
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

// costModelFile is router.cost_model_file read and parsed (nil when unset or unreadable).
type costModelFile struct {
	path  string
	model cost.Model
}

// readCostModelFile reads and validates router.cost_model_file: the policy package does no
// I/O, so the shell reads the file and hands the parsed model in (policy.UseCostModelFile).
// Its errors name the key and the file (and the line, from cost.ParseFile).
func readCostModelFile(path string) (*costModelFile, error) {
	if path == "" || !cost.IsFile(path) {
		return nil, nil // an empty key is off; a bad suffix is the setting's check
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: router.cost_model_file: %w", err)
	}
	m, _, err := cost.ParseFile(path, data)
	if err != nil {
		return nil, fmt.Errorf("config: router.cost_model_file: %w", err)
	}
	return &costModelFile{path: path, model: m}, nil
}

// useCostModelFile gives d the model file's cost model; a policy object that names cost_model
// as well is refused (source names the object in the error).
func useCostModelFile(d *policy.Disagg, f *costModelFile, source string) error {
	if f == nil {
		return nil
	}
	if err := d.UseCostModelFile(f.path, f.model); err != nil {
		return fmt.Errorf("config: router.cost_model_file: %s: %s %w", f.path, source, err)
	}
	return nil
}

// validate checks every field and builds the package configs.
func validate(fc File, disaggJSON *string, costFile *costModelFile) (*Config, error) {
	var errs []error
	bad := func(field string, value any, rule string) {
		errs = append(errs, fmt.Errorf("config: %s: %v %s", field, value, rule))
	}
	errs = append(errs, normalise(&fc))
	c := &Config{File: fc}
	checkSettings(&fc, &errs)
	var err error
	if c.Admin, err = loadAdminAccess(fc); err != nil {
		errs = append(errs, err)
	}
	if (fc.TLSCert == "") != (fc.TLSKey == "") {
		bad("tls_cert/tls_key", fc.TLSCert+"/"+fc.TLSKey, "must be given together")
	}
	c.TLS = extProcTLS(fc, bad)
	checkListenAccess(fc, c.TLS, bad)
	_ = c.LogLevel.UnmarshalText([]byte(fc.LogLevel)) // checked with the settings
	c.KVEventsMaxMessageBytes = cmp.Or(fc.Router.KVEventsMaxMessageBytes, kvevents.DefaultMaxPayloadBytes)
	mfs := withModelDefaults(fc.Models)
	prefixes := modelPrefixes(&fc)
	disc, kc := discoveryOf(fc, mfs, !fc.single, &errs)
	c.Kubernetes = kc
	pc, err := policyConfig(fc, mfs, disc, disaggJSON, costFile)
	errs = append(errs, err)
	shadow, err := shadowConfig(fc, pc, costFile)
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
		StreamRequestTimeout: fc.StreamRequestTimeout, UnansweredBookingTimeout: fc.UnansweredBookingTimeout, MaxBufferedBytes: fc.MaxBufferedBytes,
		SessionHeaders: SessionHeaders(fc.Session.Headers)}
	errs = append(errs, c.Settings.Validate())
	c.Models = buildModels(fc, mfs, prefixes, disc, &errs)
	c.BoundEvents = boundEvents(&fc, mfs, bad)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return c, nil
}

// SessionHeaders splits session.headers ("a, b,c") into lower-case names ("" : none).
func SessionHeaders(list string) []string {
	var out []string
	for h := range strings.SplitSeq(list, ",") {
		if h = strings.ToLower(strings.TrimSpace(h)); h != "" {
			out = append(out, h)
		}
	}
	return out
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
func policyConfig(fc File, models []ModelFile, disc [][]kube.Entry, disaggJSON *string, costFile *costModelFile) (policy.Config, error) {
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
		if err := useCostModelFile(&pc.Disagg, costFile, "router.conditional_disagg_config:"); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		errs = append(errs, pc.Validate())
	}
	return pc, errors.Join(errs...)
}

// shadowConfig is the live policy config with router.shadow_disagg_config's policy object in
// place of the live one (nil when absent).
func shadowConfig(fc File, live policy.Config, costFile *costModelFile) (*policy.Config, error) {
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
	// A candidate that names its own cost_model keeps it: comparing a named model with the
	// calibrated file is what a shadow is for.
	if d.CostModel == "" {
		if err := useCostModelFile(&d, costFile, "router.shadow_disagg_config:"); err != nil {
			return nil, err
		}
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
