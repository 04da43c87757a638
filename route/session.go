package route

import (
	"container/list"
	"sync"
	"sync/atomic"
	"time"

	"github.com/condisagg/condisagg/policy"
)

// Session affinity defaults (server settings session.*).
const (
	// DefaultSessionTTL: a binding unused this long expires. The Mooncake conversation
	// trace's turns come a median 123 s and a 99th percentile 25 min apart (docs/results.md),
	// so a shorter TTL forgets the sessions that come back.
	DefaultSessionTTL = 30 * time.Minute
	// DefaultMaxSessions bounds the table (least recently used out first): about 120 bytes
	// a binding plus its id.
	DefaultMaxSessions = 65536
	// MaxSessionIDBytes is the longest session id kept; extproc ignores longer header values.
	MaxSessionIDBytes = 256
)

// SessionConfig is soft session affinity: a request that names a session prefers the worker
// that served the session's last turn (policy.Input.Affinity).
type SessionConfig struct {
	Enabled bool
	TTL     time.Duration // 0: DefaultSessionTTL
	Max     int           // bound of the table; 0: DefaultMaxSessions
}

// SessionStats are the session table's counters since the router started.
type SessionStats struct {
	// Outcomes counts the booked decisions of requests with a session id by outcome
	// (indexed by policy.Affinity; AffinityNone stays 0).
	Outcomes [8]uint64
	Expired  uint64 // bindings dropped for their TTL
	Evicted  uint64 // bindings dropped for room (least recently used)
	Bindings int    // bindings held now
}

// sessions is the binding table: session id -> the worker of its last booked turn, with a TTL
// and an LRU bound. Time comes from the router's clock (the simulator's virtual one); nothing
// runs in the background: expired entries go when they are looked up or reach the LRU tail.
type sessions struct {
	ttl time.Duration
	max int

	mu  sync.Mutex // guards lru, ids, and the entries they hold
	lru list.List  // *binding values, most recently used at the front
	ids map[string]*list.Element

	outcomes         [8]atomic.Uint64
	expired, evicted atomic.Uint64
}

type binding struct {
	id     string
	worker string
	used   time.Time
}

func newSessions(c SessionConfig) *sessions {
	if !c.Enabled {
		return nil
	}
	s := &sessions{ttl: c.TTL, max: c.Max, ids: make(map[string]*list.Element)}
	if s.ttl <= 0 {
		s.ttl = DefaultSessionTTL
	}
	if s.max <= 0 {
		s.max = DefaultMaxSessions
	}
	return s
}

// lookup returns the worker bound to session id at now ("" : none, or expired now).
func (s *sessions) lookup(id string, now time.Time) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.ids[id]
	if !ok {
		return ""
	}
	b := e.Value.(*binding)
	if now.Sub(b.used) > s.ttl {
		s.remove(e)
		s.expired.Add(1)
		return ""
	}
	return b.worker
}

// bind records worker as the session's last worker at now, evicting the least recently used
// binding when the table is full (after dropping the expired ones at the tail).
func (s *sessions) bind(id, worker string, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.ids[id]; ok {
		b := e.Value.(*binding)
		b.worker, b.used = worker, now
		s.lru.MoveToFront(e)
		return
	}
	for back := s.lru.Back(); back != nil && now.Sub(back.Value.(*binding).used) > s.ttl; back = s.lru.Back() {
		s.remove(back)
		s.expired.Add(1)
	}
	if s.lru.Len() >= s.max {
		s.remove(s.lru.Back())
		s.evicted.Add(1)
	}
	s.ids[id] = s.lru.PushFront(&binding{id: id, worker: worker, used: now})
}

func (s *sessions) remove(e *list.Element) {
	delete(s.ids, e.Value.(*binding).id)
	s.lru.Remove(e)
}

func (s *sessions) count(a policy.Affinity) {
	if int(a) < len(s.outcomes) {
		s.outcomes[a].Add(1)
	}
}

func (s *sessions) stats() SessionStats {
	var st SessionStats
	for i := range s.outcomes {
		st.Outcomes[i] = s.outcomes[i].Load()
	}
	st.Expired, st.Evicted = s.expired.Load(), s.evicted.Load()
	s.mu.Lock()
	st.Bindings = s.lru.Len()
	s.mu.Unlock()
	return st
}

// SessionStats reports the session table's counters (zero when affinity is off).
func (r *Router) SessionStats() SessionStats {
	if r.sessions == nil {
		return SessionStats{}
	}
	return r.sessions.stats()
}

// SessionAffinity reports whether the router keeps session bindings.
func (r *Router) SessionAffinity() bool { return r.sessions != nil }

// Session is what a decision made of its request's session: the id, the worker bound before
// the decision ("" : none) and the outcome.
type Session struct {
	ID      string
	Bound   string
	Outcome policy.Affinity
}

// holder is the worker that holds the request's KV after dec: the decode worker, or the
// prefill worker that runs a prefill_local request whole.
func holder(dec *policy.Decision) string {
	if dec.Route == policy.RoutePrefillLocal {
		return dec.PrefillID
	}
	return dec.DecodeID
}

// settle is the session's outcome once dec is final (after the commit): a hit when the
// request lands on the bound worker whatever chose it, else the policy's reason for passing
// it over (a bypass the commit's guard re-check demoted elsewhere is overridden_guard).
func settle(bound string, dec *policy.Decision) policy.Affinity {
	switch a := dec.Inputs.Affinity; {
	case bound == "":
		return policy.AffinityMiss
	case holder(dec) == bound:
		return policy.AffinityHit
	case a == policy.AffinityHit && dec.Reason == policy.ReasonRemoteDecodeBusy:
		return policy.AffinityGuard
	case a == policy.AffinityHit || a == policy.AffinityNone || a == policy.AffinityMiss:
		return policy.AffinityGone
	default:
		return a
	}
}
