package extproc

import (
	"net"

	"context"
	"fmt"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/peer"
	"sync"
	"time"
)

// slots bounds the decisions that run at once and shares them fairly between clients. A
// decision is CPU work (parse, tokenize, overlap, decide); hundreds of them running together
// share the cores, so each takes as long as all of them and every cheap message of every
// other stream (header and response-chunk answers, the gRPC transport itself) waits behind
// them. With a bound, decisions run at full speed.
//
// Fairness (README "Resource bounds"): a freed slot goes to the waiting decision whose client
// holds the fewest slots, the oldest first among equals, so one client's queue never stands
// in front of another client's request; and a client known by its address (Envoy's
// source.address attribute) holds at most perClient slots at once, so one client cannot take
// them all. A stream without the attribute is keyed by its gRPC connection and bounded only
// by the total: Envoy multiplexes every client on a few connections.
//
// Cost: with the tokenizer bounded (max_model_len, max_pretoken_bytes) a decision costs about
// its body's bytes (parse, render, scan), so large bodies are the one way to make decisions
// expensive. Decisions on bodies of LargeDecisionBytes or more hold at most half of the slots
// together, whoever sends them: a cheap decision always finds a slot soon.
type slots struct {
	mu        sync.Mutex // guards free, held, large and queue
	size      int
	perClient int
	perLarge  int // slots large decisions may hold together
	free      int
	held      map[string]int // slots held per client key; no zero entries
	large     int            // slots held by large decisions
	queue     []*slotWaiter  // in arrival order
}

// LargeDecisionBytes is the body size from which a decision counts as large (fairslots.go):
// about 64k tokens of English.
const LargeDecisionBytes = 256 << 10

// slotWaiter is one decision waiting for a slot; granted is closed when it gets one.
type slotWaiter struct {
	key     slotKey
	granted chan struct{}
}

// slotKey names the client a decision is counted against, and its cost class.
type slotKey struct {
	id     string
	capped bool // a client address, not a connection: perClient applies
	large  bool // the body is LargeDecisionBytes or more: perLarge applies
}

func newSlots(n int) *slots {
	return &slots{size: n, perClient: max(1, (n+1)/2), perLarge: max(1, n/2), free: n, held: map[string]int{}}
}

// eligible reports whether key may take one more slot (mu held).
func (s *slots) eligible(key slotKey) bool {
	return (!key.capped || s.held[key.id] < s.perClient) && (!key.large || s.large < s.perLarge)
}

// acquire takes a slot for key, waiting at most wait (a free slot is taken even when wait <=
// 0); it returns how long it waited.
func (s *slots) acquire(ctx context.Context, key slotKey, wait time.Duration) (time.Duration, error) {
	s.mu.Lock()
	if s.free > 0 && len(s.queue) == 0 && s.eligible(key) {
		s.take(key)
		s.mu.Unlock()
		return 0, nil
	}
	if wait <= 0 {
		s.mu.Unlock()
		return 0, fmt.Errorf("%w: no decision slot free and the queue deadline passed (%d busy)", ErrOverloaded, s.size)
	}
	w := &slotWaiter{key: key, granted: make(chan struct{})}
	s.queue = append(s.queue, w)
	s.dispatch() // a free slot the queue's head could not take may suit this one
	s.mu.Unlock()
	start := time.Now()
	t := time.NewTimer(wait)
	defer t.Stop()
	var err error
	select {
	case <-w.granted:
		return time.Since(start), nil
	case <-t.C:
		err = fmt.Errorf("%w: no decision slot free within %s (%d busy)", ErrOverloaded, wait, s.size)
	case <-ctx.Done():
		err = ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-w.granted: // granted as it gave up: hand the slot on
		s.put(w.key)
	default:
		s.remove(w)
	}
	return time.Since(start), err
}

// release returns key's slot.
func (s *slots) release(key slotKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.put(key)
}

// take books a slot for key (mu held).
func (s *slots) take(key slotKey) {
	s.free--
	s.held[key.id]++
	if key.large {
		s.large++
	}
}

// put frees key's slot and passes free slots on (mu held).
func (s *slots) put(key slotKey) {
	s.free++
	if s.held[key.id]--; s.held[key.id] <= 0 {
		delete(s.held, key.id)
	}
	if key.large {
		s.large--
	}
	s.dispatch()
}

// dispatch grants free slots to the waiters whose clients hold the fewest, oldest first
// (mu held). Linear in the queue, which the queue deadline keeps short.
func (s *slots) dispatch() {
	for s.free > 0 {
		best := -1
		for i, w := range s.queue {
			if !s.eligible(w.key) {
				continue
			}
			if best < 0 || s.held[w.key.id] < s.held[s.queue[best].key.id] {
				best = i
			}
		}
		if best < 0 {
			return
		}
		w := s.queue[best]
		s.queue = append(s.queue[:best], s.queue[best+1:]...)
		s.take(w.key)
		close(w.granted)
	}
}

// remove drops a waiter that gave up (mu held).
func (s *slots) remove(w *slotWaiter) {
	for i, q := range s.queue {
		if q == w {
			s.queue = append(s.queue[:i], s.queue[i+1:]...)
			return
		}
	}
}

// attributesNamespace is where Envoy puts the ext_proc filter's request_attributes.
const attributesNamespace = "envoy.filters.http.ext_proc"

// sourceAddress is the downstream client's IP from Envoy's source.address attribute (the
// bootstrap asks for it with request_attributes), "" when absent. The port is dropped: one
// client opens many connections.
func sourceAddress(req *extprocv3.ProcessingRequest) string {
	v := req.GetAttributes()[attributesNamespace].GetFields()["source.address"].GetStringValue()
	if v == "" {
		return ""
	}
	if host, _, err := net.SplitHostPort(v); err == nil {
		return host
	}
	return v
}

// connKey keys a stream by its gRPC connection (the peer's address and port), for streams
// whose request carries no source.address.
func connKey(ctx context.Context) slotKey {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return slotKey{id: "conn " + p.Addr.String()}
	}
	return slotKey{id: "conn"}
}
