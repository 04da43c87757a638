package envoy

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/template"
	"time"
)

// PoolSelection is how a Gateway API Inference Extension gateway reads the endpoint picker's
// choice (the endpoint picker protocol sends it both ways; gateways read one).
type PoolSelection string

const (
	// SelectByHeader dials the address in x-gateway-destination-endpoint (an ORIGINAL_DST
	// cluster with use_http_header), as Istio and kgateway configure InferencePool backends.
	SelectByHeader PoolSelection = "header"
	// SelectByMetadata prefers the pool endpoint named in the dynamic metadata envoy.lb
	// x-gateway-destination-endpoint (the override_host load-balancing policy over the pool's
	// endpoints), as Envoy Gateway configures them.
	SelectByMetadata PoolSelection = "metadata"
)

// PoolGatewayParams describe an Envoy that plays a Gateway API Inference Extension gateway in
// front of an InferencePool whose endpoint picker is condisagg. Zero fields take the defaults
// listed on each field; RenderPoolGateway validates the result.
type PoolGatewayParams struct {
	// Selection picks how the gateway reads the picker's endpoint; default SelectByHeader.
	Selection PoolSelection
	// PoolEndpoints are the pool's endpoints (pod IP x target port); required with
	// SelectByMetadata (the override_host policy only picks hosts of the cluster), unused with
	// SelectByHeader.
	PoolEndpoints []Endpoint
	// EPP is condisagg's ext_proc gRPC address (the endpointPickerRef Service); required.
	EPP Endpoint
	// FailOpen sets failure_mode_allow, as an InferencePool's failureMode FailOpen does.
	// Default false (FailClose, the InferencePool default).
	FailOpen bool
	// SubsetHint, when set, is put in the filter metadata envoy.lb.subset_hint
	// x-gateway-destination-endpoint-subset of every request (a gateway's subset of the pool
	// the picker must choose from), by a set_metadata filter before ext_proc.
	SubsetHint []string
	// Proxy holds the listeners (Listen, Admin), MessageTimeout (default 10s here),
	// RouteTimeout, RouteIdleTimeout, ConnectTimeout (the pool cluster's), HealthCheckInterval
	// (the endpoint picker's), MaxRequests and AccessLogPath.
	Proxy
}

//go:embed inferencepool.yaml.tmpl
var poolGatewayTemplate string

var poolTmpl = template.Must(template.New("inferencepool").Funcs(template.FuncMap{
	"dur":         protoDuration,
	"q":           strconv.Quote,
	"clusterType": clusterType,
}).Option("missingkey=error").Parse(poolGatewayTemplate))

// WithDefaults returns p with every zero field set to its default.
func (p PoolGatewayParams) WithDefaults() PoolGatewayParams {
	if p.Selection == "" {
		p.Selection = SelectByHeader
	}
	p.Proxy.setDefaults(10 * time.Second)
	return p
}

// Validate reports every problem of p (after WithDefaults) at once.
func (p PoolGatewayParams) Validate() error {
	var errs []error
	bad := func(field string, value any, rule string) {
		errs = append(errs, fmt.Errorf("envoy: pool gateway: %s: %v %s", field, value, rule))
	}
	switch p.Selection {
	case SelectByHeader:
	case SelectByMetadata:
		if len(p.PoolEndpoints) == 0 {
			bad("pool_endpoints", "[]", "must list the pool's endpoints with selection metadata")
		}
	default:
		bad("selection", strconv.Quote(string(p.Selection)), "is not one of header, metadata")
	}
	for i, e := range p.PoolEndpoints {
		checkEndpoint(bad, fmt.Sprintf("pool_endpoints[%d]", i), e, false)
		if _, err := netip.ParseAddr(e.Host); err != nil {
			bad(fmt.Sprintf("pool_endpoints[%d].host", i), strconv.Quote(e.Host), "is not an IP address (pool endpoints are pod IPs)")
		}
	}
	checkEndpoint(bad, "epp", p.EPP, false)
	p.Proxy.check(bad)
	for i, s := range p.SubsetHint {
		if _, err := netip.ParseAddrPort(s); err != nil {
			bad(fmt.Sprintf("subset_hint[%d]", i), strconv.Quote(s), "is not an ip:port")
		}
	}
	return errors.Join(errs...)
}

// RenderPoolGateway returns the bootstrap of an Envoy configured as a Gateway API Inference
// Extension gateway for p (after WithDefaults), naming every offending field when p is invalid.
func RenderPoolGateway(p PoolGatewayParams) ([]byte, error) {
	p = p.WithDefaults()
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	data := struct {
		PoolGatewayParams
		EPPHosts []Endpoint
	}{p, []Endpoint{p.EPP}}
	if err := poolTmpl.Execute(&buf, data); err != nil {
		return nil, fmt.Errorf("envoy: render pool gateway selection=%s: %w", p.Selection, err)
	}
	return buf.Bytes(), nil
}

// WritePoolGateway renders p into dir/envoy-pool-<selection>.yaml and returns the file's path.
func WritePoolGateway(dir string, p PoolGatewayParams) (string, error) {
	out, err := RenderPoolGateway(p)
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "envoy-pool-"+string(p.WithDefaults().Selection)+".yaml")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		return "", fmt.Errorf("envoy: write pool gateway %s: %w", path, err)
	}
	return path, nil
}

// PoolAccessLine is one line of a pool gateway's access log (PoolGatewayParams.AccessLogPath);
// Envoy writes "-" for an absent value.
type PoolAccessLine struct {
	Path, Code, Upstream, Header, Metadata, Decode string
}

// ParsePoolAccessLog parses a pool gateway's access log; lines of another format are skipped.
func ParsePoolAccessLog(b []byte) []PoolAccessLine {
	var out []PoolAccessLine
	for _, line := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, "pool ")
		if !ok {
			continue
		}
		f := map[string]string{}
		for _, kv := range strings.Fields(rest) {
			if k, v, ok := strings.Cut(kv, "="); ok {
				f[k] = v
			}
		}
		out = append(out, PoolAccessLine{Path: f["path"], Code: f["code"], Upstream: f["upstream"],
			Header: f["header"], Metadata: f["metadata"], Decode: f["decode"]})
	}
	return out
}
