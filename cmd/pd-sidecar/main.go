// Command pd-sidecar is the P/D sidecar: it executes the remote-prefill path (prefill at the
// worker named by x-condisagg-prefill-host, decode at x-condisagg-decode-host) as an HTTP
// reverse proxy. The logic lives in package sidecar; this is its shell: flags, listeners,
// the metrics endpoint, signals and graceful shutdown.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/condisagg/condisagg/internal/flaglist"
	"github.com/condisagg/condisagg/internal/version"

	"github.com/condisagg/condisagg/sidecar"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if version.Requested(os.Args[1:]) {
		fmt.Println(version.String("pd-sidecar"))
		return
	}
	if err := run(ctx, os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "pd-sidecar:", err)
		os.Exit(1)
	}
}

type flags struct {
	listen, adminListen, configPath, allow, dial, logLevel string
	cfg                                                    sidecar.Config
	fallback, rewriteUsage                                 bool
	resolveEvery, drain                                    time.Duration
}

func parseFlags(args []string, stderr io.Writer) (flags, error) {
	var f flags
	fs := flag.NewFlagSet("pd-sidecar", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.listen, "listen", "0.0.0.0:8100", "proxy listen address (host:port; port 0 picks one)")
	fs.StringVar(&f.adminListen, "admin-listen", "127.0.0.1:9091", "admin listen address for /metrics and /healthz (empty: off)")
	fs.StringVar(&f.configPath, "config", "", "router YAML config; the endpoints of its workers: list form the allowlist")
	fs.StringVar(&f.allow, "allow", "", "comma-separated worker host:port allowlist (added to --config's workers)")
	fs.StringVar(&f.dial, "dial", "", "comma-separated ADDR=TARGET: a routing-header host ADDR (allowed) is dialled at TARGET, e.g. 10.0.0.11:8000=127.0.0.1:8001 when the sidecar listens on its worker's advertised endpoint")
	fs.StringVar(&f.cfg.DefaultDecodeHost, "default-decode-host", "", "host:port for requests without x-condisagg-decode-host (empty: 403)")
	fs.BoolVar(&f.fallback, "fallback-local-prefill", true, "on prefill failure, let the decode worker prefill locally")
	fs.BoolVar(&f.rewriteUsage, "rewrite-usage", false, "replace the decode answer's usage.prompt_tokens_details.cached_tokens with the prefill worker's")
	fs.DurationVar(&f.cfg.ConnectTimeout, "connect-timeout", sidecar.DefaultConnectTimeout, "TCP connect timeout per upstream attempt")
	fs.DurationVar(&f.cfg.PrefillTimeout, "prefill-timeout", sidecar.DefaultPrefillTimeout, "total time for the prefill leg, retries included")
	fs.DurationVar(&f.cfg.DecodeFirstByteTimeout, "decode-first-byte-timeout", sidecar.DefaultDecodeFirstByteTimeout, "wait for the decode worker's response headers (streaming requests)")
	fs.IntVar(&f.cfg.MaxAttempts, "max-attempts", sidecar.DefaultMaxAttempts, "tries per leg; only connect failures and 502/503/504 are retried")
	fs.DurationVar(&f.cfg.RetryBackoff, "retry-backoff", sidecar.DefaultRetryBackoff, "first retry backoff (doubles)")
	fs.DurationVar(&f.cfg.RetryBackoffMax, "retry-backoff-max", sidecar.DefaultRetryBackoffMax, "largest retry backoff")
	fs.Int64Var(&f.cfg.MaxBodyBytes, "max-body-bytes", sidecar.DefaultMaxBodyBytes, "largest client request body (413 above)")
	fs.DurationVar(&f.resolveEvery, "resolve-interval", 30*time.Second, "re-resolution interval of DNS names in the allowlist")
	fs.DurationVar(&f.drain, "drain-timeout", 30*time.Second, "on SIGTERM, how long in-flight requests may finish")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	if fs.NArg() > 0 {
		return f, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	for _, pair := range flaglist.Items(f.dial) {
		from, to, ok := strings.Cut(pair, "=")
		if !ok {
			return f, fmt.Errorf("--dial %q: want ADDR=TARGET", pair)
		}
		if f.cfg.DialOverrides == nil {
			f.cfg.DialOverrides = map[string]string{}
		}
		f.cfg.DialOverrides[strings.TrimSpace(from)] = strings.TrimSpace(to)
	}
	if !f.fallback {
		f.cfg.Fallback = sidecar.FallbackOff
	}
	if f.rewriteUsage {
		f.cfg.Usage = sidecar.UsageFromPrefill
	}
	return f, nil
}

func allowEntries(f flags) ([]string, error) {
	var entries []string
	if f.configPath != "" {
		data, err := os.ReadFile(f.configPath)
		if err != nil {
			return nil, fmt.Errorf("read --config: %w", err)
		}
		if entries, err = sidecar.ParseWorkerEndpoints(data); err != nil {
			return nil, fmt.Errorf("--config %s: %w", f.configPath, err)
		}
	}
	entries = append(entries, flaglist.Items(f.allow)...)
	if len(entries) == 0 {
		return nil, errors.New("no allowlist: give --config or --allow")
	}
	return entries, nil
}

func run(ctx context.Context, args []string, stderr io.Writer) error {
	f, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return fmt.Errorf("--log-level %q: %w", f.logLevel, err)
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))
	entries, err := allowEntries(f)
	if err != nil {
		return err
	}
	allow, err := sidecar.NewAllowlist(entries)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	proxy, err := sidecar.New(f.cfg, allow, sidecar.Options{Metrics: sidecar.NewMetrics(reg), Logger: log})
	if err != nil {
		return err
	}
	defer proxy.Close()
	return serve(ctx, f, proxy, reg, log)
}

func serve(ctx context.Context, f flags, proxy *sidecar.Proxy, reg *prometheus.Registry, log *slog.Logger) error {
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", f.listen, err)
	}
	g, gctx := errgroup.WithContext(ctx)
	log.Info("pd-sidecar listening", "endpoint", ln.Addr().String())
	g.Go(func() error { return sidecar.Serve(gctx, ln, proxy, f.drain) })
	g.Go(func() error { proxy.RunResolver(gctx, net.DefaultResolver, f.resolveEvery); return nil })
	if f.adminListen != "" {
		aln, err := net.Listen("tcp", f.adminListen)
		if err != nil {
			_ = ln.Close()
			return fmt.Errorf("listen %s: %w", f.adminListen, err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
		log.Info("pd-sidecar admin listening", "endpoint", aln.Addr().String())
		g.Go(func() error { return sidecar.Serve(gctx, aln, mux, time.Second) })
	}
	err = g.Wait()
	log.Info("pd-sidecar stopped")
	return err
}
