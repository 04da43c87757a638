package pool

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// Peer bookings: the open bookings other router replicas made on the same workers, so that
// every replica's decode-busy guard and prefill-busy test see the fleet's booked load, not only
// what it routed itself (README "Peer bookings"). The shell that carries them between replicas
// (bookbus) feeds them through ApplyPeer and calls ExpirePeers on its interval; the pool does no
// I/O for them.

// ErrPeerBookingsFull: Config.MaxPeerBookings peer bookings are held; the new one is refused.
var ErrPeerBookingsFull = errors.New("peer bookings full")

// LocalKind says what a LocalChange did to one of this replica's bookings.
type LocalKind uint8

const (
	LocalBook           LocalKind = iota + 1 // Book committed Booking
	LocalReleasePrefill                      // the prefill entry was released
	LocalRelease                             // everything was released (Release or Sweep)
)

// LocalChange is one change of this replica's own bookings, given to Options.OnLocal.
type LocalChange struct {
	Kind      LocalKind
	RequestID string
	// Booking is the committed booking (LocalBook only). Its Keys belong to the caller of Book:
	// valid only during the OnLocal call.
	Booking Booking
}

// PeerKind says what a PeerDelta does.
type PeerKind uint8

const (
	// PeerBook: the peer booked Booking; held for Lease unless renewed or released.
	PeerBook PeerKind = iota + 1
	// PeerReleasePrefill: the peer released the prefill entry of RequestID.
	PeerReleasePrefill
	// PeerRelease: the peer released RequestID.
	PeerRelease
	// PeerRenew: the peer's heartbeat. Every booking of the peer named in Open is renewed for
	// Lease; with Complete, Open is all the peer holds and every other booking of the peer
	// is dropped (a release the bus lost).
	PeerRenew
	// PeerGone: the peer stopped; all its bookings are dropped.
	PeerGone
)

// Bounds of what a peer may ask for.
const (
	// MaxPeerLease is the longest lease a peer delta may ask: a longer one is cut to it, so a
	// peer with a bad setting cannot pin load for long.
	MaxPeerLease = 10 * time.Minute
	// MinPeerLease is the shortest (a shorter one is raised to it).
	MinPeerLease = 100 * time.Millisecond
)

// PeerDelta is one change of another replica's bookings.
type PeerDelta struct {
	Replica string // the peer's replica id; with RequestID the key of a peer booking
	Kind    PeerKind
	// RequestID names the booking of PeerReleasePrefill and PeerRelease (PeerBook: Booking.RequestID).
	RequestID string
	// Booking is what the peer booked (PeerBook); Guard is ignored: the peer already committed it.
	Booking Booking
	// Lease is how long a PeerBook or PeerRenew holds, measured from its arrival on this pool's
	// clock (so a peer's clock never enters), clamped to [MinPeerLease, MaxPeerLease].
	Lease time.Duration
	// Open and Complete: PeerRenew.
	Open     []string
	Complete bool
}

// PeerStats counts what ApplyPeer did with one delta.
type PeerStats struct {
	Booked, Released, Renewed, Dropped int
}

type peerKey struct{ replica, request string }

// peerRecord is one open peer booking; guarded by Pool.mu.
type peerRecord struct {
	record
	expires time.Time // on Options.Clock: dropped by ExpirePeers after it
}

// ApplyPeer applies one peer delta. It is idempotent: a repeated PeerBook renews the lease and
// books nothing more, a release of an unknown booking is remembered for one lease so that the
// booking arriving after it (out of order) is not held, and a repeated release does nothing.
// A booking on a worker this pool does not know (or with another role) is ErrUnknownWorker; past
// Config.MaxPeerBookings ErrPeerBookingsFull; a malformed one ErrInvalidBooking. Each refusal is
// counted in condisagg_peer_bookings_rejected_total{reason}.
func (p *Pool) ApplyPeer(d PeerDelta) (PeerStats, error) {
	if d.Replica == "" {
		p.m.PeerRejected.WithLabelValues("invalid").Inc()
		return PeerStats{}, fmt.Errorf("pool: peer delta: empty replica id: %w", ErrInvalidBooking)
	}
	now := p.clock.Now()
	lease := min(max(d.Lease, MinPeerLease), MaxPeerLease)
	p.mu.Lock()
	defer p.mu.Unlock()
	defer func() { p.m.PeerBookings.Set(float64(len(p.peers))) }()
	switch d.Kind {
	case PeerBook:
		return p.peerBookLocked(d, now.Add(lease))
	case PeerReleasePrefill, PeerRelease:
		return p.peerReleaseLocked(d, now.Add(lease)), nil
	case PeerRenew:
		return p.peerRenewLocked(d, now.Add(lease)), nil
	case PeerGone:
		return PeerStats{Dropped: p.dropPeerLocked(d.Replica, nil)}, nil
	}
	p.m.PeerRejected.WithLabelValues("invalid").Inc()
	return PeerStats{}, fmt.Errorf("pool: peer delta replica=%s: kind %d: %w", d.Replica, d.Kind, ErrInvalidBooking)
}

func (p *Pool) peerBookLocked(d PeerDelta, expires time.Time) (PeerStats, error) {
	b := d.Booking
	k := peerKey{d.Replica, b.RequestID}
	if err := p.checkBooking(b); err != nil {
		p.m.PeerRejected.WithLabelValues("invalid").Inc()
		return PeerStats{}, fmt.Errorf("pool: peer book replica=%s: %w", d.Replica, err)
	}
	if r, ok := p.peers[k]; ok { // a duplicate (a resync): renew, and follow a prefill release it missed
		r.expires = expires
		if b.PrefillTokens == 0 && r.prefillOn != nil {
			p.releasePrefillLocked(&r.record)
		}
		return PeerStats{Renewed: 1}, nil
	}
	if _, ok := p.released[k]; ok { // its release came first
		delete(p.released, k)
		return PeerStats{}, nil
	}
	if len(p.peers) >= p.cfg.MaxPeerBookings {
		p.m.PeerRejected.WithLabelValues("full").Inc()
		return PeerStats{}, fmt.Errorf("pool: peer book replica=%s request=%s: %d held: %w", d.Replica, b.RequestID, len(p.peers), ErrPeerBookingsFull)
	}
	r, err := p.recordLocked(b, p.clock.Now(), p.knownLocked, false)
	if err != nil {
		p.m.PeerRejected.WithLabelValues("unknown_worker").Inc()
		return PeerStats{}, fmt.Errorf("pool: peer book replica=%s request=%s: %w", d.Replica, b.RequestID, err)
	}
	p.holdLocked(r)
	p.peers[k] = &peerRecord{record: *r, expires: expires}
	return PeerStats{Booked: 1}, nil
}

func (p *Pool) peerReleaseLocked(d PeerDelta, expires time.Time) PeerStats {
	k := peerKey{d.Replica, d.RequestID}
	r, ok := p.peers[k]
	switch {
	case ok && d.Kind == PeerRelease:
		p.unloadLocked(&r.record)
		delete(p.peers, k)
		return PeerStats{Released: 1}
	case ok:
		if r.prefillOn != nil {
			p.releasePrefillLocked(&r.record)
			return PeerStats{Released: 1}
		}
	case d.Kind == PeerRelease && len(p.released) < p.cfg.MaxPeerBookings:
		// Out of order (or a repeat): the booking, should it still come, must not be held.
		p.released[k] = expires
	case d.Kind == PeerRelease:
		p.m.PeerRejected.WithLabelValues("full").Inc()
	}
	return PeerStats{}
}

func (p *Pool) peerRenewLocked(d PeerDelta, expires time.Time) PeerStats {
	var st PeerStats
	var open map[string]bool
	if d.Complete {
		open = make(map[string]bool, len(d.Open))
	}
	for _, id := range d.Open {
		if r, ok := p.peers[peerKey{d.Replica, id}]; ok {
			r.expires = expires
			st.Renewed++
		}
		if open != nil {
			open[id] = true
		}
	}
	if open != nil {
		st.Dropped = p.dropPeerLocked(d.Replica, open)
	}
	return st
}

// dropPeerLocked drops every booking of replica whose request is not in keep.
func (p *Pool) dropPeerLocked(replica string, keep map[string]bool) int {
	n := 0
	for k, r := range p.peers {
		if k.replica == replica && !keep[k.request] {
			p.unloadLocked(&r.record)
			delete(p.peers, k)
			n++
		}
	}
	return n
}

// ExpirePeers drops every peer booking whose lease ran out by the clock's now, and forgets
// early releases as old, and returns how many bookings it dropped. A peer that went silent
// (killed, cut off) loses all its bookings one lease after its last delta or heartbeat.
func (p *Pool) ExpirePeers() int {
	now := p.clock.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for k, r := range p.peers {
		if now.After(r.expires) {
			p.unloadLocked(&r.record)
			delete(p.peers, k)
			n++
		}
	}
	for k, until := range p.released {
		if now.After(until) {
			delete(p.released, k)
		}
	}
	p.m.PeerExpired.Add(float64(n))
	p.m.PeerBookings.Set(float64(len(p.peers)))
	return n
}

// PeerBookings returns the number of peer bookings held.
func (p *Pool) PeerBookings() int {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return len(p.peers)
}

// OpenBookings returns the request ids of this replica's own open bookings (a heartbeat's
// Open list), in no particular order.
func (p *Pool) OpenBookings() []string {
	p.mu.RLock()
	defer p.mu.RUnlock()
	out := make([]string, 0, len(p.bookings))
	for id := range p.bookings {
		out = append(out, id)
	}
	return out
}

// LocalBookings returns up to max of this replica's own open bookings as they stand now (a
// released prefill entry has PrefillTokens 0; Keys are copies; Guard is empty), and how many
// are open. The bus re-sends them to its peers after a (re)connect or a peer's join, as
// PeerBook deltas: a peer that holds one already only renews it (and drops a prefill entry
// it missed the release of).
func (p *Pool) LocalBookings(max int) ([]Booking, int) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	out := make([]Booking, 0, min(max, len(p.bookings)))
	for id, r := range p.bookings {
		if len(out) >= max {
			break
		}
		b := Booking{RequestID: id, Mode: r.mode, ISL: r.isl, Keys: slices.Clone(r.keys)}
		switch r.mode {
		case ModePrefillLocal:
			b.Prefill = r.d.id
		case ModeRemote:
			b.Decode, b.Prefill = r.d.id, r.p.id
		default:
			b.Decode = r.d.id
		}
		if r.prefillOn != nil {
			b.PrefillTokens = r.prefillTokens
		}
		out = append(out, b)
	}
	return out, len(p.bookings)
}

// knownLocked resolves a peer booking's worker: any discovered worker of the role, healthy or
// not.
func (p *Pool) knownLocked(id string, role Role) (*worker, error) {
	w, ok := p.byID[id]
	switch {
	case !ok:
		return nil, fmt.Errorf("worker=%s: %w", id, ErrUnknownWorker)
	case w.role != role:
		return nil, fmt.Errorf("worker=%s is %s, not %s: %w", id, w.role, role, ErrUnknownWorker)
	}
	return w, nil
}
