package envoy

import (
	"strconv"
	"strings"
	"time"
)

// sharedFields points at what both bootstraps (Params and PoolGatewayParams) have: the two
// listeners, the route and cluster timeouts, the circuit breaker and the access log. Both
// default and check them here, so the two gateways cannot drift apart.
type sharedFields struct {
	listen, admin                            *Endpoint
	message, route, idle, connect, healthInt *time.Duration
	maxRequests                              *int
	accessLogPath                            string
}

// setDefaults sets every zero shared field to its default; message is the ext_proc message
// timeout's, which differs between the two gateways.
func (s sharedFields) setDefaults(message time.Duration) {
	if s.listen.Host == "" {
		s.listen.Host = "127.0.0.1"
	}
	if s.admin.Host == "" {
		s.admin.Host = "127.0.0.1"
	}
	setDuration(s.message, message)
	setDuration(s.route, time.Hour)
	setDuration(s.idle, 15*time.Minute)
	setDuration(s.connect, 5*time.Second)
	setDuration(s.healthInt, 5*time.Second)
	if *s.maxRequests == 0 {
		*s.maxRequests = 10000
	}
}

// check reports every problem of the shared fields through bad.
func (s sharedFields) check(bad func(field string, value any, rule string)) {
	checkEndpoint(bad, "listen", *s.listen, true)
	checkEndpoint(bad, "admin", *s.admin, true)
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"message_timeout", *s.message}, {"route_timeout", *s.route},
		{"route_idle_timeout", *s.idle}, {"connect_timeout", *s.connect},
		{"health_check_interval", *s.healthInt}} {
		if d.v < time.Millisecond {
			bad(d.name, d.v, "is below 1ms")
		}
	}
	if *s.maxRequests < 1 {
		bad("max_requests", *s.maxRequests, "is below 1")
	}
	if strings.ContainsAny(s.accessLogPath, "\n\r") {
		bad("access_log_path", strconv.Quote(s.accessLogPath), "contains a line break")
	}
}

func setDuration(d *time.Duration, def time.Duration) {
	if *d == 0 {
		*d = def
	}
}
