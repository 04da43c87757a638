// Package eventstreams adapts a model's KV event subscriptions (a kvzmq.Group of streams the
// router dials, and the streams of the bound socket, a kvzmq.Central) to what the router reads
// of them: the policy's per-worker stream signal (connected, last accepted
// BlockStored, requests routed since) and extproc's stream report for ListWorkers.
package eventstreams

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/condisagg/condisagg/admin"
	kvzmq "github.com/condisagg/condisagg/kvevents/zmq"
	"github.com/condisagg/condisagg/policy"
	"github.com/condisagg/condisagg/pool"
)

// Streams adapts the kvzmq group (and the bound socket's streams) to extproc's EventStreams
// and StreamReporter: streams keyed by pool worker id, which names the data-parallel rank
// ("<engine>/dp<rank>").
//
// Stream runs for every worker of every decision, so it takes no lock: the group's subscriber
// table, the bound socket's (fixed) table and each subscriber's RouteView are read lock-free,
// and the routed counts are one atomic word per worker (three mutexes per worker per decision
// before).
type Streams struct {
	group *kvzmq.Group
	bound *kvzmq.Central  // nil: no bound socket (or none of its streams is this model's)
	mu    sync.Mutex      // guards seen
	seen  map[string]bool // workers whose stream connected at least once (readiness)
	// route holds one *atomic.Uint64 per worker: the requests routed to it since its last
	// accepted BlockStored, packed with that store's number (routedWord).
	route sync.Map
}

// A routed word packs the stream's StoredBatches (low 40 bits) above the count (24 bits,
// saturating): a count whose batch number is not the stream's current one is stale, i.e. 0.
const (
	routedCountBits = 24
	routedCountMax  = 1<<routedCountBits - 1
	routedGenMask   = 1<<(64-routedCountBits) - 1
)

func routedWord(stores uint64, n uint64) uint64 {
	return (stores&routedGenMask)<<routedCountBits | n
}

// routedSince is the count of word w if it belongs to batch number stores, else 0.
func routedSince(w, stores uint64) int {
	if w>>routedCountBits != stores&routedGenMask {
		return 0
	}
	return int(w & routedCountMax)
}

// New adapts group g and, when bound is not nil, the streams of the bound socket (a worker's
// stream is in one or the other: config refuses a worker with both).
func New(g *kvzmq.Group, bound *kvzmq.Central) *Streams {
	return &Streams{group: g, bound: bound, seen: map[string]bool{}}
}

func (s *Streams) subscriber(worker string) *kvzmq.Subscriber {
	engine, rank := pool.SplitRankID(worker)
	if sub := s.group.Subscriber(engine, int64(rank)); sub != nil || s.bound == nil {
		return sub
	}
	return s.bound.Subscriber(engine, int64(rank))
}

// Has reports whether worker has a running stream (dialled or bound).
func (s *Streams) Has(worker string) bool { return s.subscriber(worker) != nil }

func (s *Streams) status(worker string) (kvzmq.StreamStatus, bool) {
	sub := s.subscriber(worker)
	if sub == nil {
		return kvzmq.StreamStatus{}, false
	}
	return sub.Status(), true
}

// Stream is the policy's view of a worker's stream; a worker without one is down.
func (s *Streams) Stream(worker string, _ time.Time) policy.Stream {
	sub := s.subscriber(worker)
	if sub == nil {
		return policy.Stream{}
	}
	v := sub.View()
	n := 0
	if c, ok := s.route.Load(worker); ok {
		n = routedSince(c.(*atomic.Uint64).Load(), v.StoredBatches)
	}
	return policy.Stream{Connected: v.Connected, LastStored: v.LastStored, RoutedSinceStored: n}
}

// Routed counts one request routed to worker since its last accepted BlockStored.
func (s *Streams) Routed(worker string) {
	sub := s.subscriber(worker)
	if sub == nil {
		return
	}
	stores := sub.View().StoredBatches
	c, ok := s.route.Load(worker)
	if !ok {
		c, _ = s.route.LoadOrStore(worker, new(atomic.Uint64))
	}
	ctr := c.(*atomic.Uint64)
	for {
		old := ctr.Load()
		n := uint64(routedSince(old, stores))
		if ctr.CompareAndSwap(old, routedWord(stores, min(n+1, routedCountMax))) {
			return
		}
	}
}

// StreamInfo reports the stream for ListWorkers.
func (s *Streams) StreamInfo(worker string) (admin.StreamInfo, bool) {
	st, ok := s.status(worker)
	if !ok {
		return admin.StreamInfo{}, false
	}
	return admin.StreamInfo{Connected: st.Connected, LastSeq: st.LastSeq, HasLastSeq: st.HasLast,
		Gaps: st.Gaps, Replays: st.Replays, ReplaysLost: st.ReplaysLost, LastEvent: st.LastEvent}, true
}

// Seen reports whether worker's stream has connected or delivered a batch at least once.
func (s *Streams) Seen(worker string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen[worker] {
		return true
	}
	st, ok := s.status(worker)
	if ok && (st.Connected || !st.LastEvent.IsZero()) {
		s.seen[worker] = true
	}
	return s.seen[worker]
}

// Models reports the streams of every model to ListWorkers (worker ids are unique
// across models).
type Models []*Streams

// StreamInfo reports the worker's stream from the model that has it.
func (ms Models) StreamInfo(worker string) (admin.StreamInfo, bool) {
	for _, s := range ms {
		if si, ok := s.StreamInfo(worker); ok {
			return si, true
		}
	}
	return admin.StreamInfo{}, false
}
