package config

import (
	"flag"
	"fmt"
	"log/slog"
	"net"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/condisagg/condisagg/bookbus"
	"github.com/condisagg/condisagg/cost"
	"github.com/condisagg/condisagg/extproc"
	"github.com/condisagg/condisagg/kvevents"
	"github.com/condisagg/condisagg/policy"
	"github.com/condisagg/condisagg/pool"
)

// MaxSessions bounds session.max_sessions (a binding is about 200 bytes with its id).
const MaxSessions = 1 << 24

// A setting is one scalar setting of serve. Its entry in settings is the one statement of
// its YAML key, its flag, its default, its help text, its rule and where it lands (a field of
// File, which the validated Config embeds). Adding a setting is adding its File field and its
// entry: the defaults, the flags, the rules and RestartNeeded all read the table.
type setting struct {
	key  string // YAML key, dotted below its section: "router.kv_events"
	flag string // command-line flag (Dynamo's names); "" : file only
	help string
	def  any // the default, typed like the field; nil: the zero value (or the component's default)
	// at is the field in f: *string, *bool, *int, *int64, **float64, *time.Duration or
	// *yaml.Node (a policy object: a mapping, or JSON text from the flag).
	at func(f *File) any
	// check returns "<value> <rule>" when v breaks the setting's rule, "" otherwise; nil when
	// the component that receives the value validates it (extproc.Settings, pool.Config).
	check func(v any) string
	// restart names the RestartNeeded group of a setting a reload cannot apply ("" : it can).
	restart string
}

// Restart groups of RestartNeeded.
const (
	restartListeners = "listeners/tls"
	restartModel     = "model"
	restartPool      = "workers/pool"
	restartStreams   = "max_connections/max_streams_per_connection"
	restartReplicas  = "replicas"
)

// settings is every scalar setting of serve, in the order of the file's documentation.
var settings = []setting{
	{key: "listen", flag: "listen", def: DefaultListen, restart: restartListeners, check: nonEmpty("must be host:port"),
		help: "ext_proc gRPC address (Envoy; ext_proc and health only); off loopback it needs tls_client_ca or allow_unauthenticated_listen",
		at:   func(f *File) any { return &f.Listen }},
	{key: "admin_listen", flag: "admin-listen", def: "127.0.0.1:9090", restart: restartListeners,
		help: "admin HTTP address (/metrics, /healthz, /readyz, /debug/explain)",
		at:   func(f *File) any { return &f.AdminListen }},
	{key: "admin_grpc_listen", flag: "admin-grpc-listen", def: "127.0.0.1:9003", restart: restartListeners,
		help: "Admin gRPC address (Explain, ListWorkers, ReloadConfig)",
		at:   func(f *File) any { return &f.AdminGRPCListen }},
	{key: "admin_token_file", flag: "admin-token-file", restart: restartListeners,
		help: "file holding the bearer token the Admin API requires (required off loopback unless --admin-client-ca)",
		at:   func(f *File) any { return &f.AdminTokenFile }},
	{key: "admin_tls_cert", flag: "admin-tls-cert", restart: restartListeners,
		help: "TLS certificate of both admin listeners (with --admin-tls-key)",
		at:   func(f *File) any { return &f.AdminTLSCert }},
	{key: "admin_tls_key", flag: "admin-tls-key", restart: restartListeners,
		help: "TLS key of both admin listeners",
		at:   func(f *File) any { return &f.AdminTLSKey }},
	{key: "admin_client_ca", flag: "admin-client-ca", restart: restartListeners,
		help: "CA bundle: admin clients must present a certificate it signed (mTLS)",
		at:   func(f *File) any { return &f.AdminClientCA }},
	{key: "tls_cert", flag: "tls-cert", restart: restartListeners,
		help: "TLS certificate for the gRPC port (with --tls-key)",
		at:   func(f *File) any { return &f.TLSCert }},
	{key: "tls_key", flag: "tls-key", restart: restartListeners,
		help: "TLS key for the gRPC port",
		at:   func(f *File) any { return &f.TLSKey }},
	{key: "tls_client_ca", restart: restartListeners,
		help: "CA bundle: the ext_proc port requires a client certificate it signed (mTLS; needs tls_cert and tls_key)",
		at:   func(f *File) any { return &f.TLSClientCA }},
	{key: "allow_unauthenticated_listen", restart: restartListeners,
		help: "listen may be off loopback without mTLS: the network admits only the gateway (a NetworkPolicy, a firewall)",
		at:   func(f *File) any { return &f.AllowUnauthenticatedListen }},
	{key: "max_body_bytes", flag: "max-body-bytes", def: extproc.DefaultMaxBodyBytes,
		help: "request body limit (413 above)",
		at:   func(f *File) any { return &f.MaxBodyBytes }},
	{key: "failure_mode", flag: "failure-mode", def: string(extproc.FailOpen),
		help: "internal routing failure: open (least-loaded decode worker) or closed (503)",
		at:   func(f *File) any { return &f.FailureMode }},
	{key: "debug_headers", flag: "debug-headers",
		help: "add x-condisagg-decision to requests and responses",
		at:   func(f *File) any { return &f.DebugHeaders }},
	{key: "llmd_compat", flag: "llmd-compat",
		help: "also set x-prefiller-host-port on the remote path",
		at:   func(f *File) any { return &f.LLMDCompat }},
	{key: "drain_timeout", flag: "drain-timeout", def: 15 * time.Minute, check: positive,
		help: "bound of the graceful drain on SIGTERM", restart: "drain_timeout/unready_delay",
		at: func(f *File) any { return &f.DrainTimeout }},
	{key: "unready_delay", check: notNegative, restart: "drain_timeout/unready_delay",
		help: "on SIGTERM, readiness is NOT_SERVING this long before the drain",
		at:   func(f *File) any { return &f.UnreadyDelay }},
	{key: "log_level", flag: "log-level", def: "info", check: logLevel,
		help: "debug, info, warn or error",
		at:   func(f *File) any { return &f.LogLevel }},
	{key: "stream_idle_timeout", def: extproc.DefaultStreamIdleTimeout,
		check: notZero(extproc.MinStreamIdleTimeout, extproc.MaxStreamIdleTimeout),
		help:  "[1s, 1h]: a request incomplete and silent this long gets a 408 and its stream ends",
		at:    func(f *File) any { return &f.StreamIdleTimeout }},
	{key: "decision_queue_timeout", def: extproc.DefaultDecisionQueueTimeout,
		check: notZero(extproc.MinDecisionQueueTimeout, extproc.MaxDecisionQueueTimeout),
		help:  "[1ms, 1m]: a decision's wait for a slot before failure_mode routes it",
		at:    func(f *File) any { return &f.DecisionQueueTimeout }},
	{key: "decision_concurrency", restart: "decision_concurrency", check: within(0, MaxDecisionConcurrency, " (0 = GOMAXPROCS)"),
		help: "[0, 1024]: decisions run at once (0 = GOMAXPROCS)",
		at:   func(f *File) any { return &f.DecisionConcurrency }},
	{key: "stream_request_timeout", def: extproc.DefaultStreamRequestTimeout,
		check: notZero(extproc.MinStreamIdleTimeout, extproc.MaxStreamIdleTimeout),
		help:  "[1s, 1h]: the request phase as a whole, however steadily bytes come (408 past it)",
		at:    func(f *File) any { return &f.StreamRequestTimeout }},
	{key: "unanswered_booking_timeout", def: extproc.DefaultUnansweredBookingTimeout,
		check: notZero(extproc.MinStreamIdleTimeout, extproc.MaxStreamIdleTimeout),
		help:  "[1s, 1h]: a decided stream's wait for response headers before its booking is released",
		at:    func(f *File) any { return &f.UnansweredBookingTimeout }},
	{key: "max_buffered_bytes", def: int64(extproc.DefaultMaxBufferedBytes),
		help: "bytes every open stream holds together (a chunk past it: 503 overloaded)",
		at:   func(f *File) any { return &f.MaxBufferedBytes }},
	{key: "max_connections", def: DefaultMaxConnections, restart: restartStreams, check: within(1, MaxMaxConnections, ""),
		help: "[1, 65536]: ext_proc connections (more wait in the accept queue)",
		at:   func(f *File) any { return &f.MaxConnections }},
	{key: "max_streams_per_connection", def: DefaultMaxStreamsPerConnection, restart: restartStreams,
		check: within(1, MaxStreamsPerConn, ""),
		help:  "[1, 65536]: HTTP/2 streams per ext_proc connection",
		at:    func(f *File) any { return &f.MaxStreamsPerConnection }},
	{key: "max_pretoken_bytes", def: DefaultMaxPretokenBytes, restart: "max_pretoken_bytes",
		check: within(0, MaxPretokenBytes, " (0 = no bound)"),
		help:  "[0, 1 GiB]: a prompt with a longer pre-token is routed by load untokenized (reason long_pretoken); 0 = no bound",
		at:    func(f *File) any { return &f.MaxPretokenBytes }},
	{key: "unknown_model", flag: "unknown-model", def: "reject", restart: restartModel, check: oneOf("reject", "passthrough"),
		help: "a request for a model no model serves: reject (404) or passthrough (routed by load, counted)",
		at:   func(f *File) any { return &f.UnknownModel }},
	{key: "model.tokenizer", flag: "tokenizer", restart: restartModel,
		help: "model directory with tokenizer.json, or hf:<org>/<model>[@revision] fetched at start into the Hugging Face hub cache",
		at:   func(f *File) any { return &f.Model.Tokenizer }},
	{key: "model.block_size", flag: "block-size", def: policy.DefaultBlockSize, restart: restartModel,
		help: "KV block size in tokens (must equal the workers')",
		at:   func(f *File) any { return &f.Model.BlockSize }},
	{key: "router.mode", flag: "router-mode", def: "kv",
		help: "router mode (kv is required by conditional disaggregation)",
		at:   func(f *File) any { return &f.Router.Mode }},
	{key: "router.kv_events", flag: "router-kv-events", restart: "router.kv_events",
		help: "subscribe to every worker's KV events",
		at:   func(f *File) any { return &f.Router.KVEvents }},
	{key: "router.conditional_disagg", flag: "router-conditional-disagg",
		help: "enable conditional disaggregation",
		at:   func(f *File) any { return &f.Router.ConditionalDisagg }},
	{key: "router.conditional_disagg_config", flag: "router-conditional-disagg-config",
		help: "JSON policy object (conditional-disagg.md §2)",
		at:   func(f *File) any { return &f.Router.ConditionalDisaggConfig }},
	{key: "router.queue_threshold", flag: "router-queue-threshold",
		help: "prefill queue threshold (θp when prefill_busy_threshold is unset)",
		at:   func(f *File) any { return &f.Router.QueueThreshold }},
	{key: "router.cost_model_file", flag: "router-cost-model-file", check: modelFile,
		help: "model file written by condisagg calibrate (.yaml): the slo policy's cost model when its policy object names no cost_model; read and validated at start and on reload, watched like the config file",
		at:   func(f *File) any { return &f.Router.CostModelFile }},
	{key: "router.kv_events_max_message_bytes", restart: "router.kv_events_max_message_bytes",
		check: zeroOrWithin(MinKVEventsMessageBytes, MaxKVEventsMessageBytes, fmt.Sprintf(" (0 = %d)", kvevents.DefaultMaxPayloadBytes)),
		help:  fmt.Sprintf("[64 KiB, 256 MiB]: bound of one KV event batch (each event socket's ZMQ_MAXMSGSIZE); 0 = %d", kvevents.DefaultMaxPayloadBytes),
		at:    func(f *File) any { return &f.Router.KVEventsMaxMessageBytes }},
	{key: "router.kv_events_bind", flag: "router-kv-events-bind", restart: "router.kv_events", check: checkBindEndpoint,
		help: "bind one SUB socket here for publishers that dial out (topics mapped by router.kv_events_topics); no authentication: whoever reaches it can feed the index",
		at:   func(f *File) any { return &f.Router.KVEventsBind }},
	{key: "session.affinity", flag: "session-affinity", restart: "session",
		help: "soft session affinity: a request naming a session prefers the worker of the session's last turn while the decode-busy guard admits it and (slo) its forecast meets the objective",
		at:   func(f *File) any { return &f.Session.Affinity }},
	{key: "session.headers", flag: "session-headers", def: strings.Join(extproc.DefaultSessionHeaders, ","),
		help: "request headers that name a session, comma-separated, first present wins; a value over 256 bytes or not visible ASCII is ignored and counted",
		at:   func(f *File) any { return &f.Session.Headers }},
	{key: "session.ttl", def: extproc.DefaultSessionTTL, restart: "session", check: positive,
		help: "a session binding unused this long expires",
		at:   func(f *File) any { return &f.Session.TTL }},
	{key: "session.max_sessions", def: extproc.DefaultMaxSessions, restart: "session", check: within(1, MaxSessions, ""),
		help: "[1, 16777216]: session bindings kept (least recently used out first)",
		at:   func(f *File) any { return &f.Session.MaxSessions }},
	{key: "pool.booking_ttl", def: pool.DefaultBookingTTL, restart: restartPool, help: "a booking no response released expires after this long",
		at: func(f *File) any { return &f.Pool.BookingTTL }},
	{key: "pool.sweep_interval", def: pool.DefaultSweepInterval, restart: restartPool, help: "how often expired bookings are swept",
		at: func(f *File) any { return &f.Pool.SweepInterval }},
	{key: "pool.resolve_interval", def: pool.DefaultResolveInterval, restart: restartPool, help: "how often DNS-named workers are resolved again",
		at: func(f *File) any { return &f.Pool.ResolveInterval }},
	{key: "pool.scrape_interval", restart: restartPool, help: "how often every worker's /metrics is read (0: never)",
		at: func(f *File) any { return &f.Pool.ScrapeInterval }},
	{key: "pool.health_interval", def: pool.DefaultHealthInterval, restart: restartPool, help: "/health probing period (< 0: no probing and no passive signals)",
		at: func(f *File) any { return &f.Pool.HealthInterval }},
	{key: "pool.health_timeout", def: pool.DefaultHealthTimeout, restart: restartPool, help: "one /health probe's bound",
		at: func(f *File) any { return &f.Pool.HealthTimeout }},
	{key: "pool.health_path", def: pool.DefaultHealthPath, restart: restartPool, help: "the path probed",
		at: func(f *File) any { return &f.Pool.HealthPath }},
	{key: "pool.health_failures", def: pool.DefaultHealthFailures, restart: restartPool, help: "failed probes that make a worker unhealthy",
		at: func(f *File) any { return &f.Pool.HealthFailures }},
	{key: "pool.health_successes", def: pool.DefaultHealthSuccesses, restart: restartPool, help: "passed probes that make it healthy again",
		at: func(f *File) any { return &f.Pool.HealthSuccesses }},
	{key: "pool.health_backoff_max", def: pool.DefaultHealthBackoffMax, restart: restartPool, help: "the longest probe period of an unhealthy worker",
		at: func(f *File) any { return &f.Pool.HealthBackoffMax }},
	{key: "replicas.nats_url", flag: "replicas-nats-url", restart: restartReplicas,
		help: "NATS server(s) that router replicas share their booked load through (nats:// or tls://, comma-separated; no credentials in the URL); \"\": each replica books only what it routes",
		at:   func(f *File) any { return &f.Replicas.NATSURL }},
	{key: "replicas.id", flag: "replicas-id", restart: restartReplicas,
		help: "this replica's id, unique among the replicas (\"\": the host name, the pod's name in Kubernetes)",
		at:   func(f *File) any { return &f.Replicas.ID }},
	{key: "replicas.lease", def: bookbus.DefaultLease, restart: restartReplicas, check: durationWithin(MinReplicaLease, MaxReplicaLease),
		help: "[1s, 10m]: peers drop this replica's bookings this long after its last word (heartbeats every lease/3)",
		at:   func(f *File) any { return &f.Replicas.Lease }},
	{key: "replicas.resync_interval", def: bookbus.DefaultResyncInterval, restart: restartReplicas, check: durationWithin(MinResyncInterval, MaxResyncInterval),
		help: "[50ms, 1m]: least time between two re-sends of this replica's open bookings (after its reconnect, or a peer's hello); a burst of joins costs one re-send now and one after it",
		at:   func(f *File) any { return &f.Replicas.ResyncInterval }},
	{key: "replicas.subject", def: bookbus.DefaultSubject, restart: restartReplicas, check: nonEmpty("must be a NATS subject"),
		help: "the NATS subject the replicas of one fleet share",
		at:   func(f *File) any { return &f.Replicas.Subject }},
	{key: "replicas.token_file", restart: restartReplicas,
		help: "file holding the NATS token (else $" + EnvBusToken + ")",
		at:   func(f *File) any { return &f.Replicas.TokenFile }},
	{key: "replicas.user", restart: restartReplicas,
		help: "NATS user (with replicas.password_file or $" + EnvBusPassword + ")",
		at:   func(f *File) any { return &f.Replicas.User }},
	{key: "replicas.password_file", restart: restartReplicas,
		help: "file holding the NATS user's password",
		at:   func(f *File) any { return &f.Replicas.PasswordFile }},
	{key: "replicas.tls_ca", restart: restartReplicas,
		help: "CA bundle that signed the NATS server's certificate",
		at:   func(f *File) any { return &f.Replicas.TLSCA }},
	{key: "replicas.tls_cert", restart: restartReplicas,
		help: "client certificate for the NATS server (with replicas.tls_key; mTLS may stand for the credentials)",
		at:   func(f *File) any { return &f.Replicas.TLSCert }},
	{key: "replicas.tls_key", restart: restartReplicas,
		help: "client key for the NATS server",
		at:   func(f *File) any { return &f.Replicas.TLSKey }},
	{key: "pool.upstream_failures", def: pool.DefaultUpstreamFailures, restart: restartPool, help: "upstream failures in a row that make a worker unhealthy",
		at: func(f *File) any { return &f.Pool.UpstreamFailures }},
	// Warm start: read once at startup, so a reload has nothing to apply.
	{key: "replicas.warm_from", flag: "warm-from", check: hostPortOrEmpty,
		help: "a running peer's Admin gRPC address (host:port): copy its prefix index at start and resume the KV event streams after it; unreachable: cold start",
		at:   func(f *File) any { return &f.Replicas.WarmFrom }},
	{key: "replicas.warm_token_file", help: "file holding the peer's admin bearer token (default: admin_token_file)",
		at: func(f *File) any { return &f.Replicas.WarmTokenFile }},
	{key: "replicas.warm_tls", help: "talk TLS to the peer (implied by warm_ca_file)",
		at: func(f *File) any { return &f.Replicas.WarmTLS }},
	{key: "replicas.warm_ca_file", help: "CA bundle of the peer's admin certificate (default: the system roots)",
		at: func(f *File) any { return &f.Replicas.WarmCAFile }},
	{key: "replicas.warm_timeout", def: DefaultWarmTimeout, check: durationWithin(time.Second, 10*time.Minute),
		help: "[1s, 10m]: the whole copy's bound; past it the replica starts cold",
		at:   func(f *File) any { return &f.Replicas.WarmTimeout }},
	{key: "replicas.warm_max_bytes", def: int64(DefaultWarmMaxBytes), check: int64Within(1<<20, 1<<34),
		help: "[1 MiB, 16 GiB]: the largest snapshot of one model (or of the session bindings) accepted from the peer",
		at:   func(f *File) any { return &f.Replicas.WarmMaxBytes }},
}

// Warm start defaults: a 100k-block index copies in well under a second on loopback; the
// byte limit is the peer's own (admin.DefaultSnapshotMaxBytes).
const (
	DefaultWarmTimeout  = 30 * time.Second
	DefaultWarmMaxBytes = 1 << 30
)

func hostPortOrEmpty(v any) string {
	s := v.(string)
	if s == "" {
		return ""
	}
	if h, p, err := net.SplitHostPort(s); err != nil || h == "" || p == "" {
		return strconv.Quote(s) + " must be host:port (a peer's admin_grpc_listen address, e.g. condisagg-admin:9003)"
	}
	return ""
}

func int64Within(lo, hi int64) func(any) string {
	return func(v any) string {
		if n := v.(int64); n < lo || n > hi {
			return fmt.Sprintf("%d is outside [%d, %d]", n, lo, hi)
		}
		return ""
	}
}

// value is the setting's field in f.
func (s *setting) value(f *File) reflect.Value { return reflect.ValueOf(s.at(f)).Elem() }

// singleModelOnly reports whether a setting belongs to the single-model form (its flag is an
// error beside models[]).
func (s *setting) singleModelOnly() bool { return strings.HasPrefix(s.key, "model.") }

// defaultFile is the file configuration before the YAML and the flags apply.
func defaultFile() File {
	var fc File
	for i := range settings {
		if s := &settings[i]; s.def != nil {
			s.value(&fc).Set(reflect.ValueOf(s.def))
		}
	}
	fc.Router.Selection = policy.DefaultSelection()
	fc.Router.Silence = policy.Silence{After: policy.DefaultKVEventsSilence, MinRequests: policy.DefaultKVEventsMinRequests}
	return fc
}

// addFlags defines the flag of every setting that has one, with the flag package's own
// types: each flag parses into given, in the field where its setting lands, and Load copies
// the flags given on the command line from there over the file.
func addFlags(fs *flag.FlagSet, given *File) {
	for i := range settings {
		s := &settings[i]
		if s.flag == "" {
			continue
		}
		switch p := s.at(given).(type) {
		case *string:
			fs.StringVar(p, s.flag, defaultOf(s, ""), s.help)
		case *bool:
			fs.BoolVar(p, s.flag, defaultOf(s, false), s.help)
		case *int:
			fs.IntVar(p, s.flag, defaultOf(s, 0), s.help)
		case *time.Duration:
			fs.DurationVar(p, s.flag, defaultOf(s, time.Duration(0)), s.help)
		case **float64:
			*p = new(float64)
			fs.Float64Var(*p, s.flag, 0, s.help)
		case *yaml.Node:
			fs.StringVar(&p.Value, s.flag, "", s.help) // JSON text: applyFlags makes it a string node
		default:
			panic(fmt.Sprintf("config: flag --%s of unsupported type %T", s.flag, p))
		}
	}
}

// defaultOf is s's default as a T (zero when the table gives none).
func defaultOf[T any](s *setting, zero T) T {
	if s.def == nil {
		return zero
	}
	return s.def.(T)
}

// flagSetting is the setting of a flag (nil for --config).
func flagSetting(name string) *setting {
	for i := range settings {
		if settings[i].flag == name {
			return &settings[i]
		}
	}
	return nil
}

// applyFlags sets, over the file, the settings whose flags were given on the command line.
func applyFlags(fs *flag.FlagSet, given, fc *File) {
	fs.Visit(func(fl *flag.Flag) {
		s := flagSetting(fl.Name)
		if s == nil {
			return
		}
		v := s.value(given)
		switch p := s.at(given).(type) {
		case **float64:
			x := **p // the file's copy, not the flag's variable
			v = reflect.ValueOf(&x)
		case *yaml.Node:
			// A JSON string, as a policy object may be in the file.
			v = reflect.ValueOf(yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: p.Value})
		}
		s.value(fc).Set(v)
	})
}

// defaultText is the default as the reference shows it ("" for the zero value).
func defaultText(s *setting) string {
	if s.def == nil || reflect.ValueOf(s.def).IsZero() {
		return ""
	}
	return fmt.Sprint(s.def)
}

// checkSettings appends the broken rule of every setting to errs.
func checkSettings(fc *File, errs *[]error) {
	for i := range settings {
		s := &settings[i]
		if s.check == nil {
			continue
		}
		if msg := s.check(s.value(fc).Interface()); msg != "" {
			*errs = append(*errs, fmt.Errorf("config: %s: %s", s.key, msg))
		}
	}
}

// restartGroups are the groups of the settings whose values differ between old and cur.
func restartGroups(old, cur *File) []string {
	var groups []string
	for i := range settings {
		s := &settings[i]
		if s.restart == "" || slices.Contains(groups, s.restart) {
			continue
		}
		if !reflect.DeepEqual(s.value(old).Interface(), s.value(cur).Interface()) {
			groups = append(groups, s.restart)
		}
	}
	return groups
}

// The rules of the table.

func nonEmpty(rule string) func(any) string {
	return func(v any) string {
		if v.(string) == "" {
			return `"" ` + rule
		}
		return ""
	}
}

func oneOf(values ...string) func(any) string {
	return func(v any) string {
		if !slices.Contains(values, v.(string)) {
			return strconv.Quote(v.(string)) + " must be " + strings.Join(values[:len(values)-1], ", ") + " or " + values[len(values)-1]
		}
		return ""
	}
}

func positive(v any) string {
	if d := v.(time.Duration); d <= 0 {
		return d.String() + " must be > 0"
	}
	return ""
}

// durationWithin is the range [lo, hi] of a duration.
func durationWithin(lo, hi time.Duration) func(any) string {
	return func(v any) string {
		if d := v.(time.Duration); d < lo || d > hi {
			return fmt.Sprintf("%s is outside [%s, %s]", d, lo, hi)
		}
		return ""
	}
}

func notNegative(v any) string {
	if d := v.(time.Duration); d < 0 {
		return d.String() + " must be >= 0"
	}
	return ""
}

// notZero refuses 0 for a duration whose range [lo, hi] the component checks otherwise.
func notZero(lo, hi time.Duration) func(any) string {
	return func(v any) string {
		if v.(time.Duration) == 0 {
			return fmt.Sprintf("0s is outside [%s, %s]", lo, hi)
		}
		return ""
	}
}

// within is the range [lo, hi] of an int; note says what 0 means where it is special.
func within(lo, hi int, note string) func(any) string {
	return func(v any) string {
		if n := v.(int); n < lo || n > hi {
			return fmt.Sprintf("%d is outside [%d, %d]%s", n, lo, hi, note)
		}
		return ""
	}
}

// zeroOrWithin is within for a setting whose 0 stands for a default inside [lo, hi].
func zeroOrWithin(lo, hi int, note string) func(any) string {
	in := within(lo, hi, note)
	return func(v any) string {
		if v.(int) == 0 {
			return ""
		}
		return in(v)
	}
}

// modelFile: "" (none) or a path ending in .yaml or .yml (cost.IsFile), so that a
// calibration name given here gets a pointer to cost_model instead of "no such file".
func modelFile(v any) string {
	if p := v.(string); p != "" && !cost.IsFile(p) {
		return strconv.Quote(p) + " must be a model file ending in .yaml or .yml (a named calibration goes in the policy object's cost_model)"
	}
	return ""
}

func logLevel(v any) string {
	var l slog.Level
	if err := l.UnmarshalText([]byte(v.(string))); err != nil {
		return v.(string) + " must be one of debug, info, warn, error"
	}
	return ""
}
