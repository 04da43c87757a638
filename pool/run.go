package pool

import (
	"context"
	"sync"
	"time"
)

// Run drives the pool's background work until ctx is cancelled: it resolves DNS endpoints at
// once and then every ResolveInterval, expires stale bookings every SweepInterval, probes every
// worker's HealthPath (at once, then on its schedule; unless HealthInterval < 0), and, when
// ScrapeInterval > 0, scrapes every worker's /metrics. Passive signals (ReportUpstream) count
// only while Run probes. Call Run once; the caller owns it, and it returns only after every
// goroutine it started has exited.
func (p *Pool) Run(ctx context.Context) {
	var wg sync.WaitGroup
	if p.cfg.probing() {
		wg.Go(func() { p.probeLoop(ctx) })
	}
	wg.Go(func() {
		p.every(ctx, p.cfg.ResolveInterval, func() {
			if err := p.Resolve(ctx); err != nil && ctx.Err() == nil {
				p.log.Warn("worker resolution failed; keeping previous addresses", "err", err)
			}
		})
	})
	wg.Go(func() { p.every(ctx, p.cfg.SweepInterval, func() { p.Sweep(p.clock.Now()) }) })
	if p.cfg.ScrapeInterval > 0 {
		wg.Go(func() {
			p.every(ctx, p.cfg.ScrapeInterval, func() {
				if err := p.ScrapeAll(ctx); err != nil && ctx.Err() == nil {
					p.log.Debug("worker metrics scrape failed", "err", err)
				}
			})
		})
	}
	wg.Wait()
}

// every runs f at once and then on every tick until ctx is done.
func (p *Pool) every(ctx context.Context, d time.Duration, f func()) {
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
