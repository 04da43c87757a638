package envoy

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/template"
	"time"
)

// BodyMode selects the ext_proc processing modes of a rendered bootstrap
// (envoy-extproc design §1 and §5).
type BodyMode string

const (
	// Buffered sends the whole request body in one message and streams the response body:
	// the recommended profile. Fail-open covers the whole exchange.
	Buffered BodyMode = "buffered"
	// Streamed streams both bodies. Envoy fixes the route before the request body arrives, so
	// condisagg routes such requests as bodyless; for testing that path, not for production.
	Streamed BodyMode = "streamed"
	// FullDuplex uses FULL_DUPLEX_STREAMED both ways with trailers sent, as InferencePool
	// gateways do. Envoy treats it as fail-closed, so Params.FailOpen must be false.
	FullDuplex BodyMode = "full_duplex"
)

// Modes returns every BodyMode, in the order the tests render them.
func Modes() []BodyMode { return []BodyMode{Buffered, Streamed, FullDuplex} }

// Failure modes of the ext_proc filter (Params.FailOpen).
const (
	FailOpen   = true
	FailClosed = false
)

// Endpoint is a host and port. Host is an IP literal (cluster type STATIC) or a DNS name
// (STRICT_DNS); Port 0 is allowed only for Params.Listen and Params.Admin, where Envoy picks a
// free port (read it back with Process.ListenerAddr and Process.AdminAddr).
type Endpoint struct {
	Host string
	Port int
}

// String returns host:port ([v6]:port for IPv6).
func (e Endpoint) String() string { return net.JoinHostPort(e.Host, strconv.Itoa(e.Port)) }

// ParseEndpoint parses "host:port" (or "[v6]:port").
func ParseEndpoint(s string) (Endpoint, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return Endpoint{}, fmt.Errorf("envoy: parse endpoint %q: %w", s, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return Endpoint{}, fmt.Errorf("envoy: parse endpoint %q: port %q is not a number", s, port)
	}
	return Endpoint{Host: host, Port: p}, nil
}

// DefaultMaxBodyBytes is condisagg's default max_body_bytes (extproc.DefaultMaxBodyBytes, 10
// MiB); cmd/condisagg TestBodyLimitDefaultsAgree checks the two agree.
const DefaultMaxBodyBytes = 10 << 20

// Params are the values substituted into bootstrap.yaml.tmpl. Zero fields take the defaults
// listed on each field; Render validates the result.
type Params struct {
	// Mode selects the body modes; default Buffered.
	Mode BodyMode
	// FailOpen sets failure_mode_allow. true: requests Envoy could not send to condisagg go to
	// the decode_fallback cluster (DecodeFallback required). false: Envoy answers 500 when
	// condisagg is unreachable and the catch-all route answers 503. Default false (the zero
	// value); the demo and production Buffered profile use FailOpen.
	FailOpen bool
	// Proxy holds the listeners (Listen, Admin), MessageTimeout (default 2s here),
	// RouteTimeout, RouteIdleTimeout, ConnectTimeout (the worker clusters'),
	// HealthCheckInterval (condisagg's and decode_fallback's), MaxRequests and AccessLogPath.
	Proxy
	// ExtProc is condisagg's ext_proc gRPC address; required.
	ExtProc Endpoint
	// ExtProcReplicas are further condisagg replicas (same config, same workers): hosts of the
	// condisagg cluster besides ExtProc, which Envoy balances ext_proc streams across
	// (round robin, each host gated by its own gRPC health check). Default none: one replica.
	ExtProcReplicas []Endpoint
	// ExtProcResolvesToReplicas says ExtProc.Host is a DNS name that resolves to every condisagg
	// replica, one address per ready replica (a Kubernetes headless Service), and
	// ExtProcReplicas is empty. The cluster then resolves the name as strict DNS (each address a
	// host, re-resolved at the record's TTL, IPv4 preferred) and carries the settings of several
	// replicas (ejection at the first local-origin failure, the replay of an unanswered stream on
	// another host, max_retries) whatever the number of addresses at the moment: the replica
	// count changes without a new bootstrap, and with one address the settings cost nothing
	// (an ejected last host is still used, Envoy's panic threshold; the replay goes to the same
	// host). Default false.
	ExtProcResolvesToReplicas bool
	// DecodeFallback lists every decode worker for fail-open traffic; required when FailOpen.
	DecodeFallback []Endpoint
	// RequestBodyBufferLimitBytes is the largest body Envoy buffers; set it to condisagg's
	// max_body_bytes so a body either reaches condisagg whole or gets 413 (as OpenAI JSON, by
	// the local reply mapping). Default DefaultMaxBodyBytes, condisagg's default.
	RequestBodyBufferLimitBytes int64
	// RequestReceiveTimeout bounds how long a client may take to send its whole request
	// (headers and body) to Envoy, so a stalled upload cannot hold a buffered body or an
	// ext_proc stream open; default 60s.
	RequestReceiveTimeout time.Duration
}

// StrippedHeaders returns the router-owned request headers the header_mutation filter removes
// before ext_proc runs, besides every header starting with x-condisagg- (conditional-disagg §3
// step 0).
func StrippedHeaders() []string {
	return []string{
		"x-gateway-destination-endpoint",
		"x-prefiller-host-port",
		"x-bypass-remote-prefill",
		"x-prefill-continue",
		"x-data-parallel-rank", // vLLM's data-parallel rank pin: only condisagg chooses a rank
	}
}

//go:embed bootstrap.yaml.tmpl
var bootstrapTemplate string

// FallbackStripLua is the body guard of the fail-open profiles: an Envoy Lua filter after
// ext_proc that cuts a client's engine-control members (kv_transfer_params, ec_transfer_params,
// vllm_xargs) from every request body, decided by condisagg or not, and refuses (vLLM's 400) a
// body that is not one JSON object. The Istio and Envoy Gateway examples
// carry the same script.
//
//go:embed fallback_strip.lua
var FallbackStripLua string

var tmpl = template.Must(template.New("bootstrap").Funcs(template.FuncMap{
	"dur":         protoDuration,
	"q":           strconv.Quote,
	"clusterType": clusterType,
	"indent":      indent,
	"stripLua":    func() string { return FallbackStripLua },
}).Option("missingkey=error").Parse(bootstrapTemplate))

// WithDefaults returns p with every zero field set to its default.
func (p Params) WithDefaults() Params {
	if p.Mode == "" {
		p.Mode = Buffered
	}
	p.Proxy.setDefaults(2 * time.Second)
	setDuration(&p.RequestReceiveTimeout, time.Minute)
	if p.RequestBodyBufferLimitBytes == 0 {
		p.RequestBodyBufferLimitBytes = DefaultMaxBodyBytes
	}
	return p
}

// Validate reports every problem of p (after WithDefaults) at once.
func (p Params) Validate() error {
	var errs []error
	bad := func(field string, value any, rule string) {
		errs = append(errs, fmt.Errorf("envoy: %s: %v %s", field, value, rule))
	}
	switch p.Mode {
	case Buffered, Streamed, FullDuplex:
	default:
		bad("mode", strconv.Quote(string(p.Mode)), "is not one of buffered, streamed, full_duplex")
	}
	if p.Mode == FullDuplex && p.FailOpen {
		bad("fail_open", true, "is not allowed with full_duplex (Envoy ignores failure_mode_allow once a full-duplex body was sent)")
	}
	p.Proxy.check(bad)
	checkEndpoint(bad, "ext_proc", p.ExtProc, false)
	for i, e := range p.ExtProcReplicas {
		checkEndpoint(bad, fmt.Sprintf("ext_proc_replicas[%d]", i), e, false)
	}
	if p.ExtProcResolvesToReplicas {
		if _, err := netip.ParseAddr(p.ExtProc.Host); err == nil {
			bad("ext_proc.host", strconv.Quote(p.ExtProc.Host), "is an IP address; ext_proc_resolves_to_replicas needs a DNS name that resolves to every replica")
		}
		if len(p.ExtProcReplicas) > 0 {
			bad("ext_proc_replicas", fmt.Sprintf("%d endpoints", len(p.ExtProcReplicas)), "must be empty with ext_proc_resolves_to_replicas (the name resolves to every replica)")
		}
	}
	if p.FailOpen && len(p.DecodeFallback) == 0 {
		bad("decode_fallback", "[]", "must list at least one decode worker when fail_open is set")
	}
	for i, e := range p.DecodeFallback {
		checkEndpoint(bad, fmt.Sprintf("decode_fallback[%d]", i), e, false)
	}
	if p.RequestBodyBufferLimitBytes < 1 || p.RequestBodyBufferLimitBytes > 1<<32 {
		bad("request_body_buffer_limit_bytes", p.RequestBodyBufferLimitBytes, "is outside [1, 4 GiB]")
	}
	return errors.Join(errs...)
}

func checkEndpoint(bad func(string, any, string), field string, e Endpoint, portZeroOK bool) {
	if !validHost(e.Host) {
		bad(field+".host", strconv.Quote(e.Host), "is not an IP address or DNS name")
	}
	lo := 1
	if portZeroOK {
		lo = 0
	}
	if e.Port < lo || e.Port > 65535 {
		bad(field+".port", e.Port, fmt.Sprintf("is outside [%d, 65535]", lo))
	}
}

func validHost(h string) bool {
	if _, err := netip.ParseAddr(h); err == nil {
		return true
	}
	if h == "" || len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range label {
			if !(c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
				return false
			}
		}
	}
	return true
}

// Render fills bootstrap.yaml.tmpl with p (after WithDefaults) and returns the Envoy bootstrap
// YAML. It fails, naming every offending field, when p is invalid.
func Render(p Params) ([]byte, error) {
	p = p.WithDefaults()
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	data := struct {
		Params
		StrippedHeaders []string
		ExtProcHosts    []Endpoint // ExtProc, then ExtProcReplicas
		// SeveralReplicas renders the ejection and replay settings: several listed hosts, or
		// a name that resolves to every replica.
		SeveralReplicas bool
	}{p, StrippedHeaders(), append([]Endpoint{p.ExtProc}, p.ExtProcReplicas...), len(p.ExtProcReplicas) > 0 || p.ExtProcResolvesToReplicas}
	if err := tmpl.Execute(&buf, data); err != nil {
		return nil, fmt.Errorf("envoy: render bootstrap mode=%s: %w", p.Mode, err)
	}
	return buf.Bytes(), nil
}

// WriteBootstrap renders p into dir/envoy-<mode>.yaml and returns the file's path.
func WriteBootstrap(dir string, p Params) (string, error) {
	out, err := Render(p)
	if err != nil {
		return "", err
	}
	mode := p.WithDefaults().Mode
	path := filepath.Join(dir, "envoy-"+string(mode)+".yaml")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		return "", fmt.Errorf("envoy: write bootstrap %s: %w", path, err)
	}
	return path, nil
}

// protoDuration formats d as a protobuf JSON duration ("2s", "0.25s").
func protoDuration(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "s"
}

func allIP(es []Endpoint) bool {
	for _, e := range es {
		if _, err := netip.ParseAddr(e.Host); err != nil {
			return false
		}
	}
	return true
}

// clusterType is STATIC when every endpoint is an IP literal, else STRICT_DNS.
func clusterType(es []Endpoint) string {
	if allIP(es) {
		return "STATIC"
	}
	return "STRICT_DNS"
}

// indent prefixes every non-empty line of s with n spaces, for a YAML block scalar.
func indent(n int, s string) string {
	pad := strings.Repeat(" ", n)
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = pad + l
		}
	}
	return strings.Join(lines, "\n")
}
