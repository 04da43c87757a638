package sidecar

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"
)

// Fallback says what happens when the prefill leg fails.
type Fallback int

const (
	// FallbackLocal sends the original request to D without kv_transfer_params, so D prefills
	// locally (vllm-kv-events.md §6.3 step 5). The default.
	FallbackLocal Fallback = iota
	// FallbackOff returns P's error response to the client unchanged (or a 502/504 when P gave
	// no response).
	FallbackOff
)

// UsageRewrite says whether D's usage.prompt_tokens_details.cached_tokens is replaced by P's.
type UsageRewrite int

const (
	UsageAsIs        UsageRewrite = iota // D's usage goes to the client unchanged (default)
	UsageFromPrefill                     // §6.3 step 6
)

// Defaults of Config.
const (
	DefaultConnectTimeout         = 5 * time.Second
	DefaultPrefillTimeout         = 120 * time.Second
	DefaultDecodeFirstByteTimeout = 120 * time.Second
	DefaultMaxAttempts            = 3
	DefaultRetryBackoff           = 50 * time.Millisecond
	DefaultRetryBackoffMax        = time.Second
	DefaultMaxBodyBytes           = 10 << 20
	DefaultMaxResponseBytes       = 16 << 20
	DefaultMaxSSELineBytes        = 1 << 20
	DefaultMaxIdleConnsPerHost    = 64
)

// Config is the sidecar's configuration. Zero values take the defaults above.
type Config struct {
	// DefaultDecodeHost (host:port) serves requests that carry no x-condisagg-decode-host,
	// typically the worker the sidecar sits beside. Empty: such requests get 403
	// no_decode_host. It is operator configuration and is dialled without the allowlist.
	DefaultDecodeHost string
	// DialOverrides maps a worker host:port as named in the routing headers (and allowed) to
	// the host:port actually dialled. It lets a sidecar listen on the endpoint its worker
	// advertises to the router (Envoy dials the prefill worker's endpoint on the prefill
	// route) while the worker itself listens elsewhere, e.g. 10.0.0.11:8000 -> 127.0.0.1:8001.
	DialOverrides map[string]string
	// ConnectTimeout bounds each TCP connect to P or D.
	ConnectTimeout time.Duration
	// PrefillTimeout bounds the whole prefill leg, every attempt and backoff included.
	PrefillTimeout time.Duration
	// DecodeFirstByteTimeout bounds the wait for D's response headers on streaming requests
	// (vLLM sends them before the first token). Non-streamed answers arrive whole at the end,
	// so they are bounded only by the client (Envoy's route timeout).
	DecodeFirstByteTimeout time.Duration
	// MaxAttempts is the number of tries per leg (1 = no retry). Only connect failures and
	// 502/503/504 answers are retried, and never once a byte went to the client.
	MaxAttempts int
	// RetryBackoff is the wait before the first retry; it doubles up to RetryBackoffMax.
	RetryBackoff    time.Duration
	RetryBackoffMax time.Duration
	// Fallback is the prefill-failure behaviour (default FallbackLocal).
	Fallback Fallback
	// Usage is the §6.3 step 6 switch (default UsageAsIs).
	Usage UsageRewrite
	// MaxBodyBytes is the largest client request body; larger gets 413 body_too_large.
	MaxBodyBytes int64
	// MaxResponseBytes bounds what is buffered of an upstream answer: P's response, and D's
	// non-streamed answer when its usage is rewritten.
	MaxResponseBytes int64
	// MaxSSELineBytes bounds the partial SSE line held back by the usage rewrite.
	MaxSSELineBytes int
	// MaxIdleConnsPerHost is the keep-alive pool size per worker.
	MaxIdleConnsPerHost int
}

func (c Config) withDefaults() Config {
	setDur := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	setDur(&c.ConnectTimeout, DefaultConnectTimeout)
	setDur(&c.PrefillTimeout, DefaultPrefillTimeout)
	setDur(&c.DecodeFirstByteTimeout, DefaultDecodeFirstByteTimeout)
	setDur(&c.RetryBackoff, DefaultRetryBackoff)
	setDur(&c.RetryBackoffMax, DefaultRetryBackoffMax)
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.MaxResponseBytes == 0 {
		c.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if c.MaxSSELineBytes == 0 {
		c.MaxSSELineBytes = DefaultMaxSSELineBytes
	}
	if c.MaxIdleConnsPerHost == 0 {
		c.MaxIdleConnsPerHost = DefaultMaxIdleConnsPerHost
	}
	return c
}

// Validate returns every problem of c (after defaults), joined, in the field/value/rule form.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	bad := func(field, value, rule string) {
		errs = append(errs, fmt.Errorf("sidecar config: %s: %s %s", field, value, rule))
	}
	if c.DefaultDecodeHost != "" {
		if _, err := canonicalHostPort(c.DefaultDecodeHost); err != nil {
			bad("default_decode_host", strconv.Quote(c.DefaultDecodeHost), err.Error())
		}
	}
	for _, k := range slices.Sorted(maps.Keys(c.DialOverrides)) {
		if _, err := canonicalHostPort(k); err != nil {
			bad("dial_overrides", strconv.Quote(k), err.Error())
		}
		if _, err := canonicalHostPort(c.DialOverrides[k]); err != nil {
			bad("dial_overrides["+k+"]", strconv.Quote(c.DialOverrides[k]), err.Error())
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"connect_timeout", c.ConnectTimeout}, {"prefill_timeout", c.PrefillTimeout},
		{"decode_first_byte_timeout", c.DecodeFirstByteTimeout},
		{"retry_backoff", c.RetryBackoff}, {"retry_backoff_max", c.RetryBackoffMax},
	} {
		if d.v < 0 {
			bad(d.name, d.v.String(), "must be > 0")
		}
	}
	if c.RetryBackoffMax < c.RetryBackoff {
		bad("retry_backoff_max", c.RetryBackoffMax.String(), "must be >= retry_backoff "+c.RetryBackoff.String())
	}
	if c.MaxAttempts < 1 || c.MaxAttempts > 10 {
		bad("max_attempts", strconv.Itoa(c.MaxAttempts), "is outside [1, 10]")
	}
	if c.Fallback != FallbackLocal && c.Fallback != FallbackOff {
		bad("fallback", strconv.Itoa(int(c.Fallback)), "is not FallbackLocal or FallbackOff")
	}
	if c.Usage != UsageAsIs && c.Usage != UsageFromPrefill {
		bad("usage", strconv.Itoa(int(c.Usage)), "is not UsageAsIs or UsageFromPrefill")
	}
	for _, n := range []struct {
		name string
		v    int64
	}{
		{"max_body_bytes", c.MaxBodyBytes}, {"max_response_bytes", c.MaxResponseBytes},
		{"max_sse_line_bytes", int64(c.MaxSSELineBytes)}, {"max_idle_conns_per_host", int64(c.MaxIdleConnsPerHost)},
	} {
		if n.v < 1 {
			bad(n.name, strconv.FormatInt(n.v, 10), "must be >= 1")
		}
	}
	return errors.Join(errs...)
}
