package pool

import (
	"github.com/condisagg/condisagg/policy"

	"fmt"
	"slices"
	"time"
)

// Mode says which column of conditional-disagg.md §5.1 a booking follows.
type Mode uint8

const (
	// ModeBypass books a local prefill on the decode worker (bypass and no_prefill_workers):
	// the prompt's chained block keys (shared prefixes count once), one unique block for a
	// partial tail, and PrefillTokens (eff) as a prefill entry on the decode worker.
	ModeBypass Mode = iota + 1
	// ModeRemote books PrefillTokens on the prefill worker and ceil(ISL/bs) unique blocks on the
	// decode worker (transferred KV is not deduplicated).
	ModeRemote
	// ModePrefillLocal books the whole request on the prefill worker Prefill, as ModeBypass books
	// it on a decode worker: the prompt's keys, a partial tail, and PrefillTokens as its prefill
	// entry. No decode worker is involved (Decode is empty).
	ModePrefillLocal
	// ModeHandoff books as ModeRemote with a decode worker in the prefill role: PrefillTokens
	// as a prefill entry on Prefill, the holder of the prefix (a decode worker), and
	// ceil(ISL/bs) unique blocks on Decode, which pulls the KV. The holder's prefix is already
	// referenced by whoever cached it, and its computed suffix leaves with the transfer.
	ModeHandoff
)

// Booking is one decision's load.
type Booking struct {
	RequestID string
	Mode      Mode
	Decode    string   // decode worker ID (ModeBypass, ModeRemote)
	Prefill   string   // prefill worker ID (ModeRemote, ModePrefillLocal); the holder's decode worker ID (ModeHandoff)
	Keys      []uint64 // ModeBypass, ModePrefillLocal: chained keys of the full prompt blocks from block 0 (copied)
	ISL       int
	// PrefillTokens is the prefill entry: eff on the decode worker (ModeBypass) or
	// ISL − min(cached(p), ISL) on the prefill worker (ModeRemote). 0 creates no entry.
	PrefillTokens int64
	// Guard is re-checked on current state for ModeBypass, atomically with the booking.
	Guard policy.Guard
}

// record is an open booking; guarded by Pool.mu.
type record struct {
	at            time.Time
	mode          Mode // with isl, lets LocalBookings give the booking back (a bus resync)
	isl           int
	d, p          *worker  // p nil for bypass
	keys          []uint64 // referenced on d
	unique        int64    // unique blocks on d
	prefillOn     *worker  // holder of the open prefill entry, nil once released
	prefillTokens int64
}

// Book commits b atomically: for ModeBypass it recomputes pdb(d,r) under the accounting lock,
// re-applies b.Guard and either books or returns policy.ErrGuardDenied / policy.ErrCapacityUnknown, never
// re-selecting. A removed or unhealthy worker is ErrUnknownWorker. Peer bookings (ApplyPeer)
// count in pdb like local ones. A committed booking is reported to Options.OnLocal.
func (p *Pool) Book(b Booking) error {
	if err := p.checkBooking(b); err != nil {
		return err
	}
	now := p.clock.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, dup := p.bookings[b.RequestID]; dup {
		return fmt.Errorf("pool: book request=%s: %w", b.RequestID, ErrDuplicateRequest)
	}
	r, err := p.recordLocked(b, now, p.eligibleLocked, true)
	if err != nil {
		return fmt.Errorf("pool: book request=%s: %w", b.RequestID, err)
	}
	p.holdLocked(r)
	p.bookings[b.RequestID] = r
	p.m.Bookings.Set(float64(len(p.bookings)))
	if p.onLocal != nil {
		p.onLocal(LocalChange{Kind: LocalBook, RequestID: b.RequestID, Booking: b})
	}
	return nil
}

// lookupFunc resolves a worker for a booking: eligibleLocked for local bookings (the router
// only books on eligible workers), knownLocked for a peer's (its load is real whatever this
// replica thinks of the worker's health).
type lookupFunc func(id string, role Role) (*worker, error)

// recordLocked builds the record of b on the workers lookup finds, re-checking b.Guard for a
// bypass when guard is set. It changes no load (holdLocked does).
func (p *Pool) recordLocked(b Booking, now time.Time, lookup lookupFunc, guard bool) (*record, error) {
	// d is the worker that decodes: the prefill worker itself for ModePrefillLocal.
	did, drole := b.Decode, RoleDecode
	if b.Mode == ModePrefillLocal {
		did, drole = b.Prefill, RolePrefill
	}
	d, err := lookup(did, drole)
	if err != nil {
		return nil, err
	}
	r := &record{at: now, mode: b.Mode, isl: b.ISL, d: d, prefillTokens: b.PrefillTokens}
	bs := int64(p.cfg.BlockSize)
	switch b.Mode {
	case ModeBypass, ModePrefillLocal:
		if b.ISL%p.cfg.BlockSize != 0 {
			r.unique = 1
		}
		if b.Mode == ModeBypass && guard {
			if err := p.guardLocked(b, d, r.unique); err != nil {
				return nil, err
			}
		}
		r.keys = p.copyKeysLocked(b.Keys)
		if r.prefillTokens > 0 {
			r.prefillOn = d
		}
	case ModeRemote, ModeHandoff:
		role := RolePrefill
		if b.Mode == ModeHandoff {
			role = RoleDecode
		}
		pw, err := lookup(b.Prefill, role)
		if err != nil {
			return nil, err
		}
		r.p = pw
		r.unique = (int64(b.ISL) + bs - 1) / bs
		if r.prefillTokens > 0 {
			r.prefillOn = pw
		}
	}
	return r, nil
}

// guardLocked is the decode-busy guard's commit-time re-check of a bypass on d.
func (p *Pool) guardLocked(b Booking, d *worker, unique int64) error {
	pdb := d.decodeBlocks() + int64(len(b.Keys)-activePrefix(&d.active, b.Keys)) + unique
	fresh := p.scrapeFreshAfter()
	switch b.Guard.CheckLoad(pdb, d.kvCap(), reportedUsage(d, fresh != 0 && d.scrape.At.UnixNano() >= fresh)) {
	case policy.VerdictBusy:
		p.m.GuardCommitDenied.Inc()
		return fmt.Errorf("worker=%s pdb=%d kvcap=%d: %w", d.id, pdb, d.kvCap(), policy.ErrGuardDenied)
	case policy.VerdictCapacityUnknown:
		return fmt.Errorf("worker=%s: %w", d.id, policy.ErrCapacityUnknown)
	}
	return nil
}

// holdLocked adds r's load to its workers.
func (p *Pool) holdLocked(r *record) {
	d := r.d
	for _, k := range r.keys {
		d.active.add(k)
	}
	d.unique += r.unique
	d.requests++
	d.decoding++
	if r.p != nil {
		r.p.requests++
	}
	if r.prefillOn != nil {
		r.prefillOn.apt += r.prefillTokens
	}
	p.publishLocked(d)
	if r.p != nil {
		p.publishLocked(r.p)
	}
}

// copyKeysLocked copies keys into a released booking's slice when one is free.
func (p *Pool) copyKeysLocked(keys []uint64) []uint64 {
	n := len(p.freeKeys)
	if n == 0 {
		return slices.Clone(keys)
	}
	s := p.freeKeys[n-1]
	p.freeKeys[n-1] = nil
	p.freeKeys = p.freeKeys[:n-1]
	return append(s[:0], keys...)
}

// freeKeysLocked keeps the keys of a released booking for reuse, within the bounds.
func (p *Pool) freeKeysLocked(keys []uint64) {
	if keys != nil && cap(keys) <= maxFreeKeyCap && len(p.freeKeys) < maxFreeKeySlices {
		p.freeKeys = append(p.freeKeys, keys[:0])
	}
}

func (p *Pool) checkBooking(b Booking) error {
	switch {
	case b.RequestID == "":
		return fmt.Errorf("pool: book: empty request id: %w", ErrInvalidBooking)
	case b.Mode < ModeBypass || b.Mode > ModeHandoff:
		return fmt.Errorf("pool: book request=%s: mode %d: %w", b.RequestID, b.Mode, ErrInvalidBooking)
	case b.Mode == ModeHandoff && b.Prefill == b.Decode:
		return fmt.Errorf("pool: book request=%s: handoff from %s to itself: %w", b.RequestID, b.Decode, ErrInvalidBooking)
	case b.ISL < 0 || b.PrefillTokens < 0 || b.PrefillTokens > int64(b.ISL):
		return fmt.Errorf("pool: book request=%s: isl=%d prefill_tokens=%d: %w", b.RequestID, b.ISL, b.PrefillTokens, ErrInvalidBooking)
	case len(b.Keys) > b.ISL/p.cfg.BlockSize:
		return fmt.Errorf("pool: book request=%s: %d keys for isl=%d: %w", b.RequestID, len(b.Keys), b.ISL, ErrInvalidBooking)
	}
	return nil
}

func (p *Pool) eligibleLocked(id string, role Role) (*worker, error) {
	w, err := p.knownLocked(id, role)
	if err == nil && !p.healthyLocked(w) {
		return nil, fmt.Errorf("worker=%s unhealthy: %w", id, ErrUnknownWorker)
	}
	return w, err
}

// ReleasePrefill releases the request's prefill entry (first token seen). It reports whether
// an entry was released; repeating it, or calling it after Release, is a no-op.
func (p *Pool) ReleasePrefill(requestID string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	r, ok := p.bookings[requestID]
	if !ok || r.prefillOn == nil {
		return false
	}
	p.releasePrefillLocked(r)
	if p.onLocal != nil {
		p.onLocal(LocalChange{Kind: LocalReleasePrefill, RequestID: requestID})
	}
	return true
}

// Release releases everything the request still holds (end of response, upstream error,
// cancel). It reports whether the request was booked; a second call is a no-op.
func (p *Pool) Release(requestID string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	r, ok := p.bookings[requestID]
	if !ok {
		return false
	}
	p.releaseLocked(requestID, r)
	return true
}

// Sweep releases every booking older than the TTL at now and returns how many it expired.
// Expire calls it with the injected clock's time.
func (p *Pool) Sweep(now time.Time) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for id, r := range p.bookings {
		if now.Sub(r.at) > p.cfg.BookingTTL {
			p.releaseLocked(id, r)
			n++
		}
	}
	p.m.Expired.Add(float64(n))
	return n
}

// Expire is Sweep at the injected clock's now; the shell (pool/probe) calls it every
// SweepInterval.
func (p *Pool) Expire() int { return p.Sweep(p.clock.Now()) }

func (p *Pool) releasePrefillLocked(r *record) {
	w := r.prefillOn
	r.prefillOn = nil
	if w.removed {
		return
	}
	w.apt -= r.prefillTokens
	p.publishLocked(w)
}

func (p *Pool) releaseLocked(id string, r *record) {
	p.unloadLocked(r)
	delete(p.bookings, id)
	p.m.Bookings.Set(float64(len(p.bookings)))
	if p.onLocal != nil {
		p.onLocal(LocalChange{Kind: LocalRelease, RequestID: id})
	}
}

// unloadLocked removes r's remaining load from its workers and recycles its keys.
func (p *Pool) unloadLocked(r *record) {
	if r.prefillOn != nil {
		p.releasePrefillLocked(r)
	}
	if d := r.d; !d.removed {
		for _, k := range r.keys {
			d.active.drop(k)
		}
		d.unique -= r.unique
		d.requests--
		d.decoding--
		p.publishLocked(d)
	}
	if w := r.p; w != nil && !w.removed {
		w.requests--
		p.publishLocked(w)
	}
	p.freeKeysLocked(r.keys)
	r.keys = nil
}

// FewestRequests returns the eligible worker of role with the fewest open bookings (first in
// discovery order on ties), for requests that are routed without a decision (passthrough).
func (p *Pool) FewestRequests(role Role) (WorkerInfo, bool) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	ws := p.decode
	if role == RolePrefill {
		ws = p.prefill
	}
	var best *worker
	for _, w := range ws {
		if p.healthyLocked(w) && (best == nil || w.requests < best.requests) {
			best = w
		}
	}
	if best == nil {
		return WorkerInfo{}, false
	}
	return p.infoLocked(best), true
}
