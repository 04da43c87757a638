package sidecar

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"

	"gopkg.in/yaml.v3"
)

// Resolver looks up the addresses of a DNS name; *net.Resolver satisfies it.
type Resolver interface {
	LookupHost(ctx context.Context, host string) ([]string, error)
}

// Allowlist is the set of worker host:port pairs the sidecar may dial (its SSRF guard,
// envoy-extproc.md §4). Matching is exact on the canonical form: host lower-cased, IP
// addresses in netip's canonical text, the port in plain decimal. A configured DNS name allows
// the name itself and, after Resolve, every address it resolved to, on the same port.
//
// Allowed is safe for concurrent use with Resolve: the set is an immutable map swapped through
// an atomic pointer.
type Allowlist struct {
	entries []string                          // canonical configured entries, immutable
	set     atomic.Pointer[map[string]string] // canonical host:port -> itself (for a non-allocating lookup)
}

// NewAllowlist validates entries (host:port each) and returns the list. Every bad entry is
// reported at once.
func NewAllowlist(entries []string) (*Allowlist, error) {
	a := &Allowlist{}
	var errs []error
	for i, e := range entries {
		c, err := canonicalHostPort(e)
		if err != nil {
			errs = append(errs, fmt.Errorf("sidecar allowlist: allow[%d]: %q %w", i, e, err))
			continue
		}
		a.entries = append(a.entries, c)
	}
	if len(a.entries) == 0 && len(errs) == 0 {
		errs = append(errs, errors.New("sidecar allowlist: allow: [] must name at least one worker host:port"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	a.store(nil)
	return a, nil
}

func (a *Allowlist) store(resolved []string) {
	m := make(map[string]string, len(a.entries)+len(resolved))
	for _, e := range a.entries {
		m[e] = e
	}
	for _, e := range resolved {
		m[e] = e
	}
	a.set.Store(&m)
}

// Allowed returns the canonical form of hostport and true when it is in the list. The caller
// dials the returned string, never the raw header value.
func (a *Allowlist) Allowed(hostport string) (string, bool) {
	m := *a.set.Load()
	if c, ok := m[hostport]; ok { // fast path: already canonical
		return c, true
	}
	c, err := canonicalHostPort(hostport)
	if err != nil {
		return "", false
	}
	c, ok := m[c]
	return c, ok
}

// Len is the number of host:port pairs currently allowed.
func (a *Allowlist) Len() int { return len(*a.set.Load()) }

// Resolve looks up every configured DNS name and replaces the resolved part of the set. A
// name whose lookup fails keeps nothing from earlier lookups; the error names it.
func (a *Allowlist) Resolve(ctx context.Context, r Resolver) error {
	var resolved []string
	var errs []error
	for _, e := range a.entries {
		host, port, _ := net.SplitHostPort(e)
		if _, err := netip.ParseAddr(host); err == nil {
			continue
		}
		addrs, err := r.LookupHost(ctx, host)
		if err != nil {
			errs = append(errs, fmt.Errorf("sidecar allowlist: resolve %s: %w", host, err))
			continue
		}
		for _, ip := range addrs {
			if c, err := canonicalHostPort(net.JoinHostPort(ip, port)); err == nil {
				resolved = append(resolved, c)
			}
		}
	}
	a.store(resolved)
	return errors.Join(errs...)
}

func (a *Allowlist) hasNames() bool {
	for _, e := range a.entries {
		host, _, _ := net.SplitHostPort(e)
		if _, err := netip.ParseAddr(host); err != nil {
			return true
		}
	}
	return false
}

// canonicalHostPort checks that s is exactly host:port (no scheme, userinfo, path, query or
// whitespace; a port in 1..65535 without sign or leading zero) and returns its canonical form.
func canonicalHostPort(s string) (string, error) {
	if s == "" || len(s) > 300 || strings.ContainsAny(s, "/?#@\\ \t\r\n,;\"'<>{}|^`") {
		return "", errors.New("is not host:port")
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil || host == "" {
		return "", errors.New("is not host:port")
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
		return "", fmt.Errorf("has port %q outside 1..65535", port)
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if ip.Is4In6() || ip.Zone() != "" {
			return "", errors.New("has an IPv4-mapped or zoned IPv6 address")
		}
		return net.JoinHostPort(ip.String(), port), nil
	}
	if strings.Contains(host, ":") || strings.Contains(host, "%") || !validHostname(host) {
		return "", fmt.Errorf("has invalid host %q", host)
	}
	return net.JoinHostPort(strings.ToLower(host), port), nil
}

// validHostname accepts DNS names: dot-separated labels of letters, digits, '-' and '_',
// none empty, no trailing dot.
func validHostname(h string) bool {
	if len(h) > 253 {
		return false
	}
	for label := range strings.SplitSeq(h, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, c := range []byte(label) {
			ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
			if !ok {
				return false
			}
		}
	}
	return true
}

// workersFile is the part of the router's YAML config (ARCHITECTURE.md §4) the sidecar reads.
type workersFile struct {
	Workers []struct {
		Name     string `yaml:"name"`
		Endpoint string `yaml:"endpoint"`
	} `yaml:"workers"`
}

// ParseWorkerEndpoints returns the endpoint of every entry of the `workers:` list of a router
// config file; other keys are ignored. An entry without an endpoint is an error naming it.
func ParseWorkerEndpoints(data []byte) ([]string, error) {
	var f workersFile
	if err := yaml.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("sidecar config: parse workers: %w", err)
	}
	var errs []error
	out := make([]string, 0, len(f.Workers))
	for i, w := range f.Workers {
		if w.Endpoint == "" {
			errs = append(errs, fmt.Errorf("sidecar config: workers[%d] (name %q): endpoint: \"\" must be host:port", i, w.Name))
			continue
		}
		out = append(out, w.Endpoint)
	}
	if len(f.Workers) == 0 {
		errs = append(errs, errors.New("sidecar config: workers: [] must list at least one worker"))
	}
	return out, errors.Join(errs...)
}
