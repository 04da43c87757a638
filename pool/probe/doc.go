// Package probe is the I/O shell of package pool: it probes every worker's health over HTTP,
// scrapes vLLM's /metrics, re-resolves DNS-named workers and expires stale bookings, and feeds
// each outcome to the pure pool core through the methods the core exposes (DueProbes and
// ProbeDone, ScrapeTargets and ApplyScrape, Lookups and ApplyLookups, Expire), as kvevents/zmq
// feeds kvevents.
//
// The core decides: which probe is due and when (the schedule, backoff and verdicts of README
// "Health" live in pool), what a scrape or a DNS answer changes, which booking expired. The
// shell only carries requests out and reports what came back. Its knobs are the pool's own
// Config (intervals, timeouts, paths), read with Pool.Config, so one config is validated in
// one place.
//
// Concurrency: Run is the only method that starts goroutines (the resolve, sweep, probe and
// scrape loops, at most 32 probes and 8 scrapes in flight); they stop when its context is
// cancelled and Run returns after they have exited. Resolve and ScrapeAll may be called on
// their own (tests, a one-off refresh).
//
// Imports: pool and no other condisagg package.
package probe
