package pool

import "time"

// HealthReason says why a worker's eligibility last changed. It is WorkerInfo.HealthReason and
// the reason label of condisagg_worker_health_transitions_total.
type HealthReason string

const (
	ReasonDiscovered      HealthReason = "discovered"       // eligible since discovery; no change yet
	ReasonProbeFailed     HealthReason = "probe_failed"     // the health path answered non-2xx, or the request failed
	ReasonProbeTimeout    HealthReason = "probe_timeout"    // no answer within HealthTimeout (a hung engine)
	ReasonProbeRefused    HealthReason = "probe_refused"    // nothing listens on the endpoint (a dead engine)
	ReasonConnectFailure  HealthReason = "connect_failure"  // the response phase could not connect
	ReasonUpstream5xx     HealthReason = "upstream_5xx"     // the response phase saw status >= 500
	ReasonScrapeFailed    HealthReason = "scrape_failed"    // UnhealthyAfter failed /metrics scrapes
	ReasonScrapeRecovered HealthReason = "scrape_recovered" // a /metrics scrape succeeded again
	ReasonManual          HealthReason = "manual"           // SetHealth
	ReasonRecovered       HealthReason = "recovered"        // enough consecutive good probes
)

// ProbeResult is the outcome of one probe; String is the outcome label of
// condisagg_pool_health_probes_total.
type ProbeResult uint8

const (
	ProbeOK      ProbeResult = iota // any 2xx answer
	ProbeFailed                     // a non-2xx answer, or the request failed otherwise
	ProbeTimeout                    // no answer within HealthTimeout
	ProbeRefused                    // the connection was refused
)

func (r ProbeResult) String() string {
	return [...]string{"ok", "failed", "timeout", "refused"}[r]
}

func (r ProbeResult) reason() HealthReason {
	return [...]HealthReason{"", ReasonProbeFailed, ReasonProbeTimeout, ReasonProbeRefused}[r]
}

// Flapping bounds (README "Health", rule H5).
const (
	// stableProbes good probes in a row after a return mean the worker is not flapping: its
	// next exclusion starts again from HealthSuccesses.
	stableProbes = 20
	// maxSuccessGrowth caps how far flapping multiplies HealthSuccesses.
	maxSuccessGrowth = 8
)

// healthParams are the Config knobs the health state machine reads.
type healthParams struct {
	interval, backoffMax                  time.Duration
	failures, successes, upstreamFailures int
}

func (c Config) healthParams() healthParams {
	return healthParams{interval: c.HealthInterval, backoffMax: c.HealthBackoffMax,
		failures: c.HealthFailures, successes: c.HealthSuccesses, upstreamFailures: c.UpstreamFailures}
}

// healthState is the verdict of a worker's probes and passive signals: a pure state machine
// (no clock, no I/O) that the prober feeds outcomes and that answers how long to wait before
// the next probe. Its zero value is an up worker.
type healthState struct {
	down     bool
	reason   HealthReason  // why it went down; meaningful while down
	fails    int           // consecutive failed probes while up
	upstream int           // consecutive passive failures while up
	oks      int           // consecutive good probes while down
	need     int           // good probes that bring it back; set on each exclusion
	backoff  time.Duration // wait after the next failed probe while down
	returned bool          // it has come back at least once
	stable   int           // good probes since it came back, up to stableProbes
}

// probe applies one probe outcome (rules H1, H3, H4) and returns whether the worker went up or
// down, and the wait before its next probe.
func (s *healthState) probe(hp healthParams, r ProbeResult) (changed bool, wait time.Duration) {
	switch {
	case !s.down && r == ProbeOK:
		s.fails = 0
		s.stable = min(s.stable+1, stableProbes)
		return false, hp.interval
	case !s.down:
		if s.fails++; s.fails < hp.failures {
			return false, hp.interval
		}
		s.goDown(hp, r.reason())
		return true, hp.interval
	case r == ProbeOK:
		// Good probes while down come at the base interval so a recovered worker returns in
		// (need-1) intervals; the backoff level is kept for a relapse.
		if s.oks++; s.oks < s.need {
			return false, hp.interval
		}
		*s = healthState{returned: true, need: s.need}
		return true, hp.interval
	default:
		s.oks = 0
		wait = s.backoff
		s.backoff = min(2*s.backoff, hp.backoffMax)
		return false, wait
	}
}

// upstreamFailure applies a connect failure or 5xx seen in the response phase (rule H2) and
// reports whether it excluded the worker. Signals about an excluded worker are ignored: only
// probes bring it back.
func (s *healthState) upstreamFailure(hp healthParams, reason HealthReason) (changed bool) {
	if s.down {
		return false
	}
	if s.upstream++; s.upstream < hp.upstreamFailures {
		return false
	}
	s.goDown(hp, reason)
	return true
}

// upstreamSuccess applies a response that is not a failure: the passive streak restarts.
func (s *healthState) upstreamSuccess() {
	if !s.down {
		s.upstream = 0
	}
}

// goDown excludes the worker. Its first probe comes after one interval and failures then back
// off (H3). A worker excluded again before it was stable needs twice the good probes (H5).
func (s *healthState) goDown(hp healthParams, reason HealthReason) {
	need := hp.successes
	if s.returned && s.stable < stableProbes {
		need = min(max(2*s.need, hp.successes), maxSuccessGrowth*hp.successes)
	}
	*s = healthState{down: true, reason: reason, need: need, returned: s.returned,
		backoff: min(2*hp.interval, hp.backoffMax)}
}
