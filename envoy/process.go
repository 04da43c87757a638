package envoy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/condisagg/condisagg/internal/proc"
)

// StartOptions tune Start. The zero value is ready for tests.
type StartOptions struct {
	// Output receives Envoy's stdout and stderr (for example a file, or a writer that logs to
	// testing.T); the last 16 KiB are kept for error messages either way.
	Output io.Writer
	// LogLevel is Envoy's --log-level; default "warn".
	LogLevel string
	// Concurrency is Envoy's worker thread count; default 1 (the machine is shared).
	Concurrency int
	// StopTimeout bounds Stop's wait after SIGTERM before it kills Envoy; default
	// proc.DefaultGrace (5s).
	StopTimeout time.Duration
	// FileFlushInterval is how often Envoy writes buffered file access logs out
	// (--file-flush-interval-msec); default Envoy's own (10 s). A reader of the log sets it low.
	FileFlushInterval time.Duration
}

// outputTailBytes is how much of Envoy's output Output and Start's errors keep.
const outputTailBytes = 16 << 10

// Process is a running Envoy started by Start. Stop it with Stop; its methods are safe for
// concurrent use.
type Process struct {
	proc      *proc.Proc
	adminAddr string            // set by Start, read-only after
	listeners map[string]string // set by Start, read-only after
}

// Start runs `bin -c configPath` on this machine and returns once Envoy's admin /ready answers
// 200, with the admin and listener addresses read back from Envoy (so a bootstrap rendered with
// port 0 works). ctx bounds only the start-up wait; the process runs until Stop. On failure Envoy
// is stopped and the error carries the tail of its output.
func Start(ctx context.Context, bin, configPath string, opts StartOptions) (*Process, error) {
	if opts.LogLevel == "" {
		opts.LogLevel = "warn"
	}
	if opts.Concurrency == 0 {
		opts.Concurrency = 1
	}
	dir, err := os.MkdirTemp("", "condisagg-envoy-")
	if err != nil {
		return nil, fmt.Errorf("envoy: start %s: %w", configPath, err)
	}
	// Envoy writes the admin address once, at start-up, and Start has read it when it returns.
	defer os.RemoveAll(dir)
	addrFile := filepath.Join(dir, "admin-address")
	args := []string{"-c", configPath,
		"--disable-hot-restart", "--log-level", opts.LogLevel, "--concurrency", strconv.Itoa(opts.Concurrency),
		"--admin-address-path", addrFile, "--drain-time-s", "1", "--parent-shutdown-time-s", "2"}
	if opts.FileFlushInterval > 0 {
		args = append(args, "--file-flush-interval-msec", strconv.FormatInt(max(opts.FileFlushInterval.Milliseconds(), 1), 10))
	}
	pr, err := proc.Start(proc.Config{Name: "envoy", Path: bin, Args: args,
		Output: opts.Output, TailBytes: outputTailBytes, Grace: opts.StopTimeout})
	if err != nil {
		return nil, fmt.Errorf("envoy: start %s: %w", configPath, err)
	}
	p := &Process{proc: pr}
	if err := p.awaitReady(ctx, addrFile); err != nil {
		_ = p.Stop()
		return nil, fmt.Errorf("envoy: start %s: %w; output: %s", configPath, err, p.Output())
	}
	return p, nil
}

// awaitReady polls (Envoy is an external process) until the admin address file exists and
// /ready answers 200, then reads the listener addresses.
func (p *Process) awaitReady(ctx context.Context, addrFile string) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for /ready: %w", ctx.Err())
		case <-p.proc.Exited():
			return fmt.Errorf("envoy exited before it was ready: %v", p.proc.Err())
		case <-tick.C:
		}
		b, err := os.ReadFile(addrFile)
		if err != nil || len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		p.adminAddr = string(bytes.TrimSpace(b))
		body, code, err := p.adminGet(ctx, "/ready")
		if err != nil || code != http.StatusOK || strings.TrimSpace(body) != "LIVE" {
			continue
		}
		ls, err := p.readListeners(ctx)
		if err != nil {
			return err
		}
		p.listeners = ls
		return nil
	}
}

// readListeners asks the admin API for every listener's bound address.
func (p *Process) readListeners(ctx context.Context) (map[string]string, error) {
	body, code, err := p.adminGet(ctx, "/listeners?format=json")
	if err != nil || code != http.StatusOK {
		return nil, fmt.Errorf("admin /listeners: status %d: %v", code, err)
	}
	var doc struct {
		ListenerStatuses []struct {
			Name         string `json:"name"`
			LocalAddress struct {
				SocketAddress struct {
					Address   string `json:"address"`
					PortValue int    `json:"port_value"`
				} `json:"socket_address"`
			} `json:"local_address"`
		} `json:"listener_statuses"`
	}
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		return nil, fmt.Errorf("admin /listeners: decode %q: %w", tail([]byte(body)), err)
	}
	ls := make(map[string]string, len(doc.ListenerStatuses))
	for _, l := range doc.ListenerStatuses {
		sa := l.LocalAddress.SocketAddress
		ls[l.Name] = Endpoint{Host: sa.Address, Port: sa.PortValue}.String()
	}
	return ls, nil
}

// AdminAddr returns the admin interface's host:port.
func (p *Process) AdminAddr() string { return p.adminAddr }

// ListenerAddr returns the bound host:port of the named listener ("llm" in the bootstrap), or
// "" if Envoy has no such listener.
func (p *Process) ListenerAddr(name string) string { return p.listeners[name] }

// Counter returns the value of one Envoy counter or gauge from the admin /stats endpoint, for
// example "cluster.decode.original_dst_host_invalid" or "http.llm.ext_proc.streams_failed".
// A stat Envoy has not created yet is an error wrapping ErrNoStat.
func (p *Process) Counter(ctx context.Context, name string) (uint64, error) {
	body, code, err := p.adminGet(ctx, "/stats?format=json&filter=^"+escapeStatRegex(name)+"$")
	if err != nil || code != http.StatusOK {
		return 0, fmt.Errorf("envoy: stat %s: status %d: %v", name, code, err)
	}
	var doc struct {
		Stats []struct {
			Name  string          `json:"name"`
			Value json.RawMessage `json:"value"`
		} `json:"stats"`
	}
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		return 0, fmt.Errorf("envoy: stat %s: decode %q: %w", name, tail([]byte(body)), err)
	}
	for _, s := range doc.Stats {
		if s.Name == name {
			v, err := strconv.ParseUint(string(s.Value), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("envoy: stat %s: value %s is not a counter: %w", name, s.Value, err)
			}
			return v, nil
		}
	}
	return 0, fmt.Errorf("%w: %s", ErrNoStat, name)
}

// ErrNoStat means Envoy reports no stat of the requested name.
var ErrNoStat = errors.New("envoy: no such stat")

func escapeStatRegex(name string) string {
	var b strings.Builder
	for _, c := range name {
		if strings.ContainsRune(`.\+*?()|[]{}^$`, c) {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func (p *Process) adminGet(ctx context.Context, path string) (string, int, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.adminAddr+path, nil)
	if err != nil {
		return "", 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	return string(b), resp.StatusCode, err
}

// PrometheusStats returns Envoy's statistics in the Prometheus text format (/stats/prometheus),
// as a Prometheus server scrapes them.
func (p *Process) PrometheusStats(ctx context.Context) (string, error) {
	body, code, err := p.adminGet(ctx, "/stats/prometheus")
	if err != nil || code != http.StatusOK {
		return "", fmt.Errorf("envoy: /stats/prometheus: status %d: %v", code, err)
	}
	return body, nil
}

// Output returns the last 16 KiB Envoy printed.
func (p *Process) Output() string { return p.proc.Output() }

// Exited is closed once the Envoy process has ended (after Stop, or on its own).
func (p *Process) Exited() <-chan struct{} { return p.proc.Exited() }

// Stop sends SIGTERM, waits up to StartOptions.StopTimeout, then kills Envoy, and waits until the
// process is reaped. It may be called more than once; it returns nil when Envoy exits cleanly on
// SIGTERM, an error wrapping proc.ErrKilled when it had to be killed, and the exit error when
// Envoy had ended on its own (proc.Proc.Stop).
func (p *Process) Stop() error { return p.proc.Stop() }
