package pool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"syscall"
	"time"
)

// Bounds of probing.
const (
	probeConcurrent = 32      // probes in flight at once, over all workers
	maxProbeBody    = 4 << 10 // bytes of a health answer read, so that its connection is reused
	// probeGapDivisor: a requested probe starts no sooner than HealthInterval/4 after the
	// previous one, so a burst of failing responses costs one probe, not one each.
	probeGapDivisor = 4
)

// probeSlot is a worker's place in the probe schedule. Times are the process's own clock, not
// Options.Clock: they drive real timers. Guarded by Pool.mu.
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
// engine is confirmed by its refused port. Reports count only while Run probes and only for
// workers not already excluded (only probes bring a worker back). An unknown id is
// ErrUnknownWorker.
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
// reason to: the engine may be dead, or only its publisher. It is a no-op while Run does not
// probe or when the worker is excluded (its backoff decides). An unknown id is
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
	at := time.Now()
	if soonest := w.probe.started.Add(p.cfg.HealthInterval / probeGapDivisor); soonest.After(at) {
		at = soonest
	}
	if at.Before(w.probe.next) {
		w.probe.next = at
		p.kickProber()
	}
}

// kickProber wakes the probe loop to recompute its schedule; a pending wake-up is enough.
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

func (p *Pool) setProbing(on bool) {
	p.mu.Lock()
	p.probing = on
	p.mu.Unlock()
}

// probeLoop probes every worker's HealthPath until ctx is done and returns once its probes have
// finished. Each worker has at most one probe in flight and all workers at most
// probeConcurrent; a probe starts when its worker's slot is due, or sooner on request.
func (p *Pool) probeLoop(ctx context.Context) {
	p.setProbing(true)
	defer p.setProbing(false)
	var wg sync.WaitGroup
	defer wg.Wait()
	sem := make(chan struct{}, probeConcurrent)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-p.kick:
		}
		due, wait := p.dueProbes(sem)
		for _, w := range due {
			wg.Go(func() {
				p.probeWorker(ctx, w)
				<-sem
				p.kickProber() // a worker may be waiting for this slot
			})
		}
		t.Reset(wait)
	}
}

// dueProbes claims a slot of sem for every worker whose probe is due and returns them with
// the wait until the next one is due (at most HealthInterval, so that workers discovered
// meanwhile are picked up even without a kick). A due worker that finds sem full waits for
// the kick of a finishing probe.
func (p *Pool) dueProbes(sem chan struct{}) ([]*worker, time.Duration) {
	now := time.Now()
	wait := p.cfg.HealthInterval
	var due []*worker
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
			select {
			case sem <- struct{}{}:
				w.probe.inFlight, w.probe.started = true, now
				due = append(due, w)
			default:
			}
		}
	}
	return due, wait
}

// probeWorker probes w once and applies the outcome.
func (p *Pool) probeWorker(ctx context.Context, w *worker) {
	r, err := p.probeOne(ctx, w)
	p.mu.Lock()
	defer p.mu.Unlock()
	w.probe.inFlight = false
	if w.removed || ctx.Err() != nil {
		return // Run is stopping: a cancelled probe says nothing about the worker
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

// probeOne sends GET HealthPath to w, bounded by HealthTimeout. Any 2xx is healthy.
func (p *Pool) probeOne(ctx context.Context, w *worker) (probeResult, error) {
	pctx, cancel := context.WithTimeout(ctx, p.cfg.HealthTimeout)
	defer cancel()
	url := "http://" + w.endpoint + p.cfg.HealthPath
	req, err := http.NewRequestWithContext(pctx, http.MethodGet, url, nil)
	if err != nil {
		return probeFailed, fmt.Errorf("pool: probe worker=%s url=%s: %w", w.id, url, err)
	}
	resp, err := p.http.Do(req)
	if err != nil {
		r := probeFailed
		switch {
		case pctx.Err() != nil && ctx.Err() == nil:
			r = probeTimeout
		case errors.Is(err, syscall.ECONNREFUSED):
			r = probeRefused
		}
		return r, fmt.Errorf("pool: probe worker=%s url=%s: %w", w.id, url, err)
	}
	_, _ = io.CopyN(io.Discard, resp.Body, maxProbeBody)
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return probeFailed, fmt.Errorf("pool: probe worker=%s url=%s: status %d", w.id, url, resp.StatusCode)
	}
	return probeOK, nil
}
