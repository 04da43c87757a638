package pool

import (
	"fmt"
	"slices"
	"time"
)

// probeGapDivisor: a requested probe starts no sooner than HealthInterval/4 after the previous
// one, so a burst of failing responses costs one probe, not one each.
const probeGapDivisor = 4

// probeSlot is a worker's place in the probe schedule, in Options.Clock's time (the shell's
// timers wait the durations DueProbes returns). Guarded by Pool.mu.
type probeSlot struct {
	next      time.Time // when the next probe is due; zero: at once
	started   time.Time // start of the last probe
	inFlight  bool
	requested bool // a probe was asked for while one was in flight
}

// Upstream is what the response phase saw of one request sent to a worker.
type Upstream struct {
	// Status is the HTTP status of the worker's response; 0 when none arrived.
	Status int
	// ConnectFailure says that no connection to the worker could be made.
	ConnectFailure bool
}

// ReportUpstream feeds the health of worker id with one response (rule H2): a connect failure
// or a status >= 500 is a failure, any other status resets the streak, and a zero Status
// without a connect failure (say, a client cancel) says nothing. UpstreamFailures failures in
// a row exclude the worker at once; each failure also asks for an immediate probe, so a dead
// engine is confirmed by its refused port. Reports count only while the shell probes
// (BeginProbing) and only for workers not already excluded (only probes bring a worker back).
// An unknown id is ErrUnknownWorker.
func (p *Pool) ReportUpstream(id string, u Upstream) error {
	var reason HealthReason
	switch {
	case u.ConnectFailure:
		reason = ReasonConnectFailure
	case u.Status >= 500:
		reason = ReasonUpstream5xx
	}
	if reason == "" {
		// The common case, a good response on a worker without a failure streak, needs no
		// write lock.
		p.mu.RLock()
		w, ok := p.byID[id]
		streak := ok && w.health.upstream > 0
		p.mu.RUnlock()
		if !ok {
			return fmt.Errorf("pool: report upstream worker=%s: %w", id, ErrUnknownWorker)
		}
		if !streak || u.Status == 0 {
			return nil
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	w, ok := p.byID[id]
	switch {
	case !ok:
		return fmt.Errorf("pool: report upstream worker=%s: %w", id, ErrUnknownWorker)
	case !p.probing:
		return nil
	case reason == "":
		w.health.upstreamSuccess()
		return nil
	}
	if w.health.upstreamFailure(p.hp, reason) {
		p.updateHealthLocked(w, reason, fmt.Errorf("%d failures in a row, last status=%d connect_failure=%t",
			p.hp.upstreamFailures, u.Status, u.ConnectFailure))
	}
	p.requestProbeLocked(w)
	return nil
}

// RequestProbe asks the prober to probe worker id now rather than at its next slot (no sooner
// than HealthInterval/4 after its previous probe). The loss of a worker's KV event stream is a
// reason to: the engine may be dead, or only its publisher. It is a no-op while the shell does
// not probe or when the worker is excluded (its backoff decides). An unknown id is
// ErrUnknownWorker.
func (p *Pool) RequestProbe(id string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	w, ok := p.byID[id]
	if !ok {
		return fmt.Errorf("pool: request probe worker=%s: %w", id, ErrUnknownWorker)
	}
	p.requestProbeLocked(w)
	return nil
}

func (p *Pool) requestProbeLocked(w *worker) {
	switch {
	case !p.probing || w.health.down:
	case w.probe.inFlight:
		// The probe in flight may have started before the cause: probe again after it.
		w.probe.requested = true
	default:
		p.pullProbeLocked(w)
	}
}

// pullProbeLocked moves w's next probe to now, or to a quarter interval after its last one.
func (p *Pool) pullProbeLocked(w *worker) {
	at := p.clock.Now()
	if soonest := w.probe.started.Add(p.cfg.HealthInterval / probeGapDivisor); soonest.After(at) {
		at = soonest
	}
	if at.Before(w.probe.next) {
		w.probe.next = at
		p.kickProber()
	}
}

// kickProber wakes the shell's probe loop (ProbeKick) to recompute its schedule; a pending
// wake-up is enough.
func (p *Pool) kickProber() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// HealthyCount is the number of eligible workers of role: serve stays SERVING while the decode
// count is at least one, however many others are excluded.
func (p *Pool) HealthyCount(role Role) int {
	p.mu.RLock()
	defer p.mu.RUnlock()
	ws := p.decode
	if role == RolePrefill {
		ws = p.prefill
	}
	n := 0
	for _, w := range ws {
		if w.eligible {
			n++
		}
	}
	return n
}

// Changed returns a channel that is closed at the next change of membership or of any
// worker's eligibility, so a watcher (readiness, a test) waits on the event instead of
// polling. Take the channel before reading the state it guards.
func (p *Pool) Changed() <-chan struct{} {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.changed
}

// bumpLocked records a membership or eligibility change: snapshots get a new version and
// Changed watchers wake.
func (p *Pool) bumpLocked() {
	p.version++
	close(p.changed)
	p.changed = make(chan struct{})
}

// downCausesLocked lists what currently excludes w (rule H6), the probe verdict first.
func (p *Pool) downCausesLocked(w *worker) []HealthReason {
	var out []HealthReason
	if w.health.down {
		out = append(out, w.health.reason)
	}
	if p.cfg.UnhealthyAfter > 0 && w.scrapeFailures >= p.cfg.UnhealthyAfter {
		out = append(out, ReasonScrapeFailed)
	}
	if !w.extHealthy {
		out = append(out, ReasonManual)
	}
	return out
}

// updateHealthLocked recomputes w's eligibility after one of its inputs changed for reason
// (cause, if any, is logged) and publishes a transition.
func (p *Pool) updateHealthLocked(w *worker, reason HealthReason, cause error) {
	causes := p.downCausesLocked(w)
	eligible := len(causes) == 0
	if eligible == w.eligible {
		if !eligible && !slices.Contains(causes, w.reason) {
			w.reason = causes[0] // the cause named so far has cleared; name one that holds
		}
		return
	}
	w.eligible, w.reason, w.since = eligible, reason, p.clock.Now()
	p.bumpLocked()
	p.m.HealthTransitions.WithLabelValues(w.id, string(reason)).Inc()
	switch {
	case eligible:
		p.log.Info("worker eligible again", "worker", w.id, "reason", reason)
	case cause != nil:
		p.log.Warn("worker excluded from selection", "worker", w.id, "reason", reason, "err", cause)
	default:
		p.log.Warn("worker excluded from selection", "worker", w.id, "reason", reason)
	}
	p.publishLocked(w)
}

// BeginProbing tells the pool that the shell probes from now on: passive signals
// (ReportUpstream) and probe requests count until EndProbing.
func (p *Pool) BeginProbing() { p.setProbing(true) }

// EndProbing tells the pool that the shell has stopped probing and has no probe in flight.
func (p *Pool) EndProbing() { p.setProbing(false) }

func (p *Pool) setProbing(on bool) {
	p.mu.Lock()
	p.probing = on
	p.mu.Unlock()
}

// ProbeKick returns the channel that wakes the shell's probe loop: a probe was requested
// sooner than scheduled, or workers joined (probed at once). Call DueProbes when it fires.
func (p *Pool) ProbeKick() <-chan struct{} { return p.kick }

// ProbeTarget is one worker whose health probe is due: the shell sends GET HealthPath to
// Endpoint and reports the outcome with ProbeDone (or ProbeCancelled).
type ProbeTarget struct {
	ID       string
	Endpoint string // ip:port
	w        *worker
}

// DueProbes claims at most free workers whose probe is due at the clock's now (each then has
// its probe in flight until ProbeDone or ProbeCancelled) and returns them with the wait until
// the next one is due: at most HealthInterval, so that workers discovered meanwhile are
// picked up even without a kick. A due worker left out for want of free slots is returned by
// a later call; the shell calls again when one of its probes finishes.
func (p *Pool) DueProbes(free int) ([]ProbeTarget, time.Duration) {
	now := p.clock.Now()
	wait := p.cfg.HealthInterval
	var due []ProbeTarget
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ws := range [][]*worker{p.decode, p.prefill} {
		for _, w := range ws {
			if w.probe.inFlight {
				continue
			}
			if d := w.probe.next.Sub(now); d > 0 {
				wait = min(wait, d)
				continue
			}
			if len(due) < free {
				w.probe.inFlight, w.probe.started = true, now
				due = append(due, ProbeTarget{ID: w.id, Endpoint: w.endpoint, w: w})
			}
		}
	}
	return due, wait
}

// ProbeCancelled ends t's probe without an outcome: the shell is stopping, and a cancelled
// probe says nothing about the worker.
func (p *Pool) ProbeCancelled(t ProbeTarget) {
	p.mu.Lock()
	t.w.probe.inFlight = false
	p.mu.Unlock()
}

// ProbeDone applies the outcome r of t's probe (err, if any, says why it failed) to the
// worker's health (rules H1, H3, H4) and schedules its next probe.
func (p *Pool) ProbeDone(t ProbeTarget, r ProbeResult, err error) {
	w := t.w
	p.mu.Lock()
	defer p.mu.Unlock()
	w.probe.inFlight = false
	if w.removed {
		return
	}
	p.m.HealthProbes.WithLabelValues(w.id, r.String()).Inc()
	if err != nil && !w.health.down {
		p.log.Debug("worker health probe failed", "worker", w.id, "err", err)
	}
	changed, wait := w.health.probe(p.hp, r)
	w.probe.next = w.probe.started.Add(wait)
	if w.probe.requested {
		w.probe.requested = false
		if !w.health.down {
			p.pullProbeLocked(w)
		}
	}
	if changed {
		reason := ReasonRecovered
		if w.health.down {
			reason = w.health.reason
		}
		p.updateHealthLocked(w, reason, err)
	}
}
