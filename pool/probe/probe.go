package probe

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/condisagg/condisagg/pool"
)

// Resolver looks up the addresses of a DNS name; *net.Resolver satisfies it.
type Resolver interface {
	LookupHost(ctx context.Context, host string) ([]string, error)
}

// Options are the injected collaborators of a Shell.
type Options struct {
	Resolver   Resolver     // default net.DefaultResolver
	HTTPClient *http.Client // default a new client; used by the scrape and the health probes
	Logger     *slog.Logger // default discards
}

// Shell does the pool's I/O: health probes, /metrics scrapes and DNS lookups.
type Shell struct {
	pool *pool.Pool
	cfg  pool.Config
	res  Resolver
	http *http.Client
	log  *slog.Logger
}

// New returns the shell of p. It starts no goroutine and does no I/O.
func New(p *pool.Pool, opts Options) *Shell {
	s := &Shell{pool: p, cfg: p.Config(), res: opts.Resolver, http: opts.HTTPClient, log: opts.Logger}
	if s.res == nil {
		s.res = net.DefaultResolver
	}
	if s.http == nil {
		s.http = &http.Client{}
	}
	if s.log == nil {
		s.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return s
}

// Run drives the pool's background work until ctx is cancelled: it resolves DNS endpoints at
// once and then every ResolveInterval, expires stale bookings every SweepInterval, probes every
// worker's HealthPath (at once, then on its schedule; unless HealthInterval < 0), and, when
// ScrapeInterval > 0, scrapes every worker's /metrics; it reads every SGLang server's
// /server_info once and logs the flags that do not fit (engines.go). Passive signals (ReportUpstream) count
// only while Run probes. Call Run once; the caller owns it, and it returns only after every
// goroutine it started has exited.
func (s *Shell) Run(ctx context.Context) {
	var wg sync.WaitGroup
	if s.cfg.Probing() {
		wg.Go(func() { s.probeLoop(ctx) })
	}
	wg.Go(func() {
		every(ctx, s.cfg.ResolveInterval, func() {
			if err := s.Resolve(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("worker resolution failed; keeping previous addresses", "err", err)
			}
		})
	})
	wg.Go(func() { every(ctx, s.cfg.SweepInterval, func() { s.pool.Expire() }) })
	if s.hasSGLang() {
		wg.Go(func() { s.checkEngines(ctx) })
	}
	if s.cfg.ScrapeInterval > 0 {
		wg.Go(func() {
			every(ctx, s.cfg.ScrapeInterval, func() {
				if err := s.ScrapeAll(ctx); err != nil && ctx.Err() == nil {
					s.log.Debug("worker metrics scrape failed", "err", err)
				}
			})
		})
	}
	wg.Wait()
}

// hasSGLang reports whether a configured worker is an SGLang server (checkEngines has work).
func (s *Shell) hasSGLang() bool {
	for _, w := range s.cfg.Workers {
		if w.Engine.Kind() == pool.EngineSGLang {
			return true
		}
	}
	return false
}

// every runs f at once and then on every tick until ctx is done.
func every(ctx context.Context, d time.Duration, f func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		f()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Resolve looks up every DNS-named worker once and applies the answers (pool.ApplyLookups):
// new addresses join, vanished ones leave, and a name whose lookup fails keeps its previous
// workers; the errors are returned joined.
func (s *Shell) Resolve(ctx context.Context) error {
	ls := s.pool.Lookups()
	for i := range ls {
		ls[i].Addrs, ls[i].Err = s.res.LookupHost(ctx, ls[i].Host)
	}
	return s.pool.ApplyLookups(ls)
}
