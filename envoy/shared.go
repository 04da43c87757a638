package envoy

import (
	"strconv"
	"strings"
	"time"
)

// Proxy holds what both bootstraps have, Params and PoolGatewayParams, which embed it: the two
// listeners, the route and cluster timeouts, the circuit breaker and the access log. Both
// default and check it here, so the two gateways cannot drift apart.
type Proxy struct {
	// Listen is the client-facing listener; default 127.0.0.1:0 (Envoy picks the port).
	Listen Endpoint
	// Admin is Envoy's admin interface; default 127.0.0.1:0.
	Admin Endpoint
	// MessageTimeout is ext_proc's per-message timeout (no timer in full duplex); default 2s
	// in Params, 10s in PoolGatewayParams.
	MessageTimeout time.Duration
	// RouteTimeout and RouteIdleTimeout bound a whole request and its silences;
	// defaults 3600s and 900s (long generations, non-streamed answers).
	RouteTimeout, RouteIdleTimeout time.Duration
	// ConnectTimeout applies to the worker clusters (the pool cluster); default 5s.
	ConnectTimeout time.Duration
	// HealthCheckInterval is the period of Envoy's active health checks: condisagg's (the
	// endpoint picker's) gRPC health and, in Params, decode_fallback's; default 5s.
	HealthCheckInterval time.Duration
	// MaxRequests is every cluster's circuit-breaker limit; default 10000.
	MaxRequests int
	// AccessLogPath, when set, enables a one-line-per-request access log there. Params logs the
	// route, upstream host, destination and decode-host headers and response code details;
	// PoolGatewayParams the path, status, upstream host, destination header and the envoy.lb
	// destination metadata (ParsePoolAccessLog).
	AccessLogPath string
}

// setDefaults sets every zero field to its default; message is the ext_proc message timeout's,
// which differs between the two gateways.
func (x *Proxy) setDefaults(message time.Duration) {
	if x.Listen.Host == "" {
		x.Listen.Host = "127.0.0.1"
	}
	if x.Admin.Host == "" {
		x.Admin.Host = "127.0.0.1"
	}
	setDuration(&x.MessageTimeout, message)
	setDuration(&x.RouteTimeout, time.Hour)
	setDuration(&x.RouteIdleTimeout, 15*time.Minute)
	setDuration(&x.ConnectTimeout, 5*time.Second)
	setDuration(&x.HealthCheckInterval, 5*time.Second)
	if x.MaxRequests == 0 {
		x.MaxRequests = 10000
	}
}

// check reports every problem of x through bad.
func (x Proxy) check(bad func(field string, value any, rule string)) {
	checkEndpoint(bad, "listen", x.Listen, true)
	checkEndpoint(bad, "admin", x.Admin, true)
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"message_timeout", x.MessageTimeout}, {"route_timeout", x.RouteTimeout},
		{"route_idle_timeout", x.RouteIdleTimeout}, {"connect_timeout", x.ConnectTimeout},
		{"health_check_interval", x.HealthCheckInterval}} {
		if d.v < time.Millisecond {
			bad(d.name, d.v, "is below 1ms")
		}
	}
	if x.MaxRequests < 1 {
		bad("max_requests", x.MaxRequests, "is below 1")
	}
	if strings.ContainsAny(x.AccessLogPath, "\n\r") {
		bad("access_log_path", strconv.Quote(x.AccessLogPath), "contains a line break")
	}
}

func setDuration(d *time.Duration, def time.Duration) {
	if *d == 0 {
		*d = def
	}
}
