package main

import (
	"sync"
	"time"

	"github.com/condisagg/condisagg/extproc"
	kvzmq "github.com/condisagg/condisagg/kvevents/zmq"
	"github.com/condisagg/condisagg/policy"
)

// eventStreams adapts the kvzmq group to extproc's EventStreams and StreamReporter:
// rank-0 streams keyed by pool worker id.
type eventStreams struct {
	group *kvzmq.Group
	mu    sync.Mutex        // guards routed and seen
	seen  map[string]bool   // workers whose stream connected at least once (readiness)
	route map[string]routed // requests routed since the worker's last accepted BlockStored
}

type routed struct {
	since time.Time // the LastStored the count refers to
	n     int
}

func newEventStreams(g *kvzmq.Group) *eventStreams {
	return &eventStreams{group: g, seen: map[string]bool{}, route: map[string]routed{}}
}

func (s *eventStreams) status(worker string) (kvzmq.StreamStatus, bool) {
	sub := s.group.Subscriber(worker, 0)
	if sub == nil {
		return kvzmq.StreamStatus{}, false
	}
	return sub.Status(), true
}

// Stream is the policy's view of a worker's stream; a worker without one is down.
func (s *eventStreams) Stream(worker string, _ time.Time) policy.Stream {
	st, ok := s.status(worker)
	if !ok {
		return policy.Stream{}
	}
	s.mu.Lock()
	r := s.route[worker]
	s.mu.Unlock()
	n := 0
	if r.since.Equal(st.LastStored) {
		n = r.n
	}
	return policy.Stream{Connected: st.Connected, LastStored: st.LastStored, RoutedSinceStored: n}
}

// Routed counts one request routed to worker since its last accepted BlockStored.
func (s *eventStreams) Routed(worker string) {
	st, ok := s.status(worker)
	if !ok {
		return
	}
	s.mu.Lock()
	r := s.route[worker]
	if !r.since.Equal(st.LastStored) {
		r = routed{since: st.LastStored}
	}
	r.n++
	s.route[worker] = r
	s.mu.Unlock()
}

// StreamInfo reports the stream for ListWorkers.
func (s *eventStreams) StreamInfo(worker string) (extproc.StreamInfo, bool) {
	st, ok := s.status(worker)
	if !ok {
		return extproc.StreamInfo{}, false
	}
	return extproc.StreamInfo{Connected: st.Connected, LastSeq: st.LastSeq, HasLastSeq: st.HasLast,
		Gaps: st.Gaps, Replays: st.Replays, ReplaysLost: st.ReplaysLost, LastEvent: st.LastEvent}, true
}

// Seen reports whether worker's stream has connected or delivered a batch at least once.
func (s *eventStreams) Seen(worker string) bool {
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

// modelStreams reports the streams of every model to ListWorkers (worker ids are unique
// across models).
type modelStreams []*eventStreams

// StreamInfo reports the worker's stream from the model that has it.
func (ms modelStreams) StreamInfo(worker string) (extproc.StreamInfo, bool) {
	for _, s := range ms {
		if si, ok := s.StreamInfo(worker); ok {
			return si, true
		}
	}
	return extproc.StreamInfo{}, false
}
