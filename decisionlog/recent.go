package decisionlog

import (
	"cmp"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/condisagg/condisagg/policy"
	"github.com/condisagg/condisagg/route"
)

// Placement is where a routed request went, as the placement mix counts it. The five are
// disjoint: a decision is exactly one of them.
type Placement uint8

const (
	PlacementPrefill      Placement = iota // route prefill: remote prefill on a prefill worker
	PlacementDecode                        // route decode by a policy decision (bypass, aggregated)
	PlacementPrefillLocal                  // route prefill_local: the whole request on a prefill worker
	PlacementFallback                      // route decode without a policy decision (passthrough, failure_open)
	PlacementHandoff                       // route handoff: prefill on the prefix's decode worker, decode on another
	NumPlacements
)

// PlacementNames label the placements (the JSON keys of the status page's mix); all but
// "fallback" are the routes' names.
var PlacementNames = [NumPlacements]string{"prefill", "decode", "prefill_local", "fallback", "handoff"}

// PlacementOf classifies an outcome.
func PlacementOf(out *route.Outcome) Placement {
	switch {
	case out.Route == policy.RoutePrefill:
		return PlacementPrefill
	case out.Route == policy.RoutePrefillLocal:
		return PlacementPrefillLocal
	case out.Route == policy.RouteHandoff:
		return PlacementHandoff
	case out.IsFallback():
		return PlacementFallback
	}
	return PlacementDecode
}

// Entry is one recorded decision.
type Entry struct {
	Seq       uint64 // 1 for the first decision the Recent saw, then one more per decision
	At        time.Time
	RequestID string // x-request-id ("" when the request had none)
	Model     string // route.Outcome.Model
	LoRA      string // route.Outcome.LoRA
	Placement Placement
	Record    route.Record
	Inputs    policy.Inputs // every input of the policy (zero for fallbacks)
	Latency   time.Duration // the pipeline's stages summed
}

// MixBucket is how many decisions of each placement fell into [Start, Start+bucket).
type MixBucket struct {
	Start  time.Time
	Counts [NumPlacements]int64
}

// Recent defaults and bounds.
const (
	DefaultRecentDecisions = 256
	DefaultMixBucket       = 10 * time.Second
	DefaultMixBuckets      = 60 // 10 minutes of 10 s buckets
	MaxRecentDecisions     = 1 << 16
	MaxMixBuckets          = 1 << 14
)

// RecentOptions size a Recent; zero fields take the defaults above.
type RecentOptions struct {
	Decisions int           // decisions kept
	Bucket    time.Duration // width of a mix bucket (at least a second)
	Buckets   int           // mix buckets kept, the newest included
}

// Recent keeps the last decisions and the placement mix over time, both in fixed rings:
// what the admin status page shows. Add is on the request path: one atomic increment, one
// per-slot lock (contended only by a writer a whole ring ahead, or a reader of that slot), one
// struct copy and one atomic add; it never allocates. Readers copy slots out under the same
// per-slot locks, so they never stall writers on other slots.
//
// Safe for concurrent use. A nil *Recent records nothing.
type Recent struct {
	slots  []recentSlot
	next   atomic.Uint64 // Seq of the last Add
	bucket time.Duration
	mix    []mixSlot
}

type recentSlot struct {
	mu sync.Mutex // guards e
	e  Entry
}

// mixSlot counts one bucket. epoch changes only under mu, after the counts were zeroed, so an
// adder that loads the epoch it wants also sees the zeroed counts.
type mixSlot struct {
	mu    sync.Mutex   // serialises the reset to a new epoch
	epoch atomic.Int64 // 1 + the bucket number (unix time / bucket) counted here; 0 = never used
	n     [NumPlacements]atomic.Int64
}

// NewRecent returns an empty Recent sized by o.
func NewRecent(o RecentOptions) (*Recent, error) {
	o.Decisions = cmp.Or(o.Decisions, DefaultRecentDecisions)
	o.Buckets = cmp.Or(o.Buckets, DefaultMixBuckets)
	o.Bucket = cmp.Or(o.Bucket, DefaultMixBucket)
	var errs []error
	if o.Decisions < 1 || o.Decisions > MaxRecentDecisions {
		errs = append(errs, fmt.Errorf("decisionlog: recent decisions: %d is outside [1, %d]", o.Decisions, MaxRecentDecisions))
	}
	if o.Buckets < 1 || o.Buckets > MaxMixBuckets {
		errs = append(errs, fmt.Errorf("decisionlog: mix buckets: %d is outside [1, %d]", o.Buckets, MaxMixBuckets))
	}
	if o.Bucket < time.Second {
		errs = append(errs, fmt.Errorf("decisionlog: mix bucket: %s must be at least 1s", o.Bucket))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &Recent{slots: make([]recentSlot, o.Decisions), bucket: o.Bucket, mix: make([]mixSlot, o.Buckets)}, nil
}

// Add records the routed outcome out, decided at at, and returns its Seq (0 for a nil Recent),
// by which later facts about the request (its transfer outcome) are joined to the entry.
func (r *Recent) Add(at time.Time, requestID string, out *route.Outcome) uint64 {
	if r == nil {
		return 0
	}
	seq := r.next.Add(1)
	p := PlacementOf(out)
	var lat time.Duration
	for _, d := range out.Stages {
		lat += d
	}
	s := &r.slots[(seq-1)%uint64(len(r.slots))]
	s.mu.Lock()
	// A writer descheduled between its increment and here may find a newer entry (a ring
	// later) already in its slot: the newer one stays.
	if s.e.Seq < seq {
		s.e = Entry{Seq: seq, At: at, RequestID: requestID, Model: out.Model, LoRA: out.LoRA, Placement: p,
			Record: out.Record(), Inputs: out.Decision.Inputs, Latency: lat}
	}
	s.mu.Unlock()
	r.count(at, p)
	return seq
}

// count adds one decision of placement p to the bucket of at.
func (r *Recent) count(at time.Time, p Placement) {
	epoch := at.UnixNano()/int64(r.bucket) + 1
	m := &r.mix[uint64(epoch)%uint64(len(r.mix))]
	if cur := m.epoch.Load(); cur != epoch {
		if cur > epoch {
			return // a decision older than the whole ring (a clock step back): nowhere to count it
		}
		m.mu.Lock()
		if m.epoch.Load() < epoch {
			for i := range m.n {
				m.n[i].Store(0)
			}
			m.epoch.Store(epoch)
		}
		m.mu.Unlock()
		if m.epoch.Load() != epoch {
			return
		}
	}
	m.n[p].Add(1)
}

// Latest appends the newest decisions, newest first, at most limit (and at most the ring's
// size), to dst.
func (r *Recent) Latest(dst []Entry, limit int) []Entry {
	if r == nil {
		return dst
	}
	last := r.next.Load()
	n := uint64(len(r.slots))
	for seq := last; seq > 0 && last-seq < n && limit > 0; seq-- {
		s := &r.slots[(seq-1)%n]
		s.mu.Lock()
		e := s.e
		s.mu.Unlock()
		if e.Seq != seq {
			continue // not written yet, or already replaced by a newer decision
		}
		dst = append(dst, e)
		limit--
	}
	return dst
}

// Total is the number of decisions recorded since the start.
func (r *Recent) Total() uint64 {
	if r == nil {
		return 0
	}
	return r.next.Load()
}

// Size is how many decisions the ring keeps.
func (r *Recent) Size() int {
	if r == nil {
		return 0
	}
	return len(r.slots)
}

// Bucket is the width of a mix bucket.
func (r *Recent) Bucket() time.Duration { return r.bucket }

// Mix returns the placement counts of every bucket in the window that ends with now's bucket,
// oldest first; buckets without decisions count zero.
func (r *Recent) Mix(now time.Time) []MixBucket {
	if r == nil {
		return nil
	}
	newest := now.UnixNano()/int64(r.bucket) + 1
	out := make([]MixBucket, len(r.mix))
	for i := range out {
		epoch := newest - int64(len(out)-1-i)
		out[i].Start = time.Unix(0, (epoch-1)*int64(r.bucket))
		m := &r.mix[uint64(epoch)%uint64(len(r.mix))]
		if m.epoch.Load() != epoch {
			continue
		}
		for p := range out[i].Counts {
			out[i].Counts[p] = m.n[p].Load()
		}
		if m.epoch.Load() != epoch {
			out[i].Counts = [NumPlacements]int64{} // reset to a newer bucket while read
		}
	}
	return out
}
