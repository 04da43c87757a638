package route

import (
	"container/list"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"time"
)

// A session snapshot carries the session bindings to a starting replica with the prefix index
// (Admin IndexSnapshot, serve's replicas.warm_from), so that a follow-up turn the new replica
// decides goes to the worker its peer bound the session to.
//
// Layout of version 1 (integers are unsigned LEB128 varints; str is a length and the bytes):
//
//	magic "cdsess" | version byte 1 | n | n × (str session | str worker | remaining_ms)
//
// Entries run from the least to the most recently used. remaining_ms is how long the binding
// has left before its TTL ends, on the exporter's clock at the export: a duration, never a
// time, because the replicas' clocks differ. The importer counts it from its own now.
const (
	sessionSnapMagic   = "cdsess"
	sessionSnapVersion = 1
	// maxSessionWorkerBytes bounds a worker id in a snapshot (config names are far shorter).
	maxSessionWorkerBytes = 1024
	// maxSessionRemaining bounds remaining_ms: a year, far above any TTL worth setting.
	maxSessionRemaining = 365 * 24 * time.Hour
)

// sessionEntry is one decoded binding.
type sessionEntry struct {
	id, worker string
	remaining  time.Duration
}

// ExportSessions encodes the session bindings alive at the router's now (layout above),
// keeping the most recently used ones within maxBytes (0: no bound), and returns the bytes and
// how many bindings they hold. With affinity off it returns nil, 0.
func (r *Router) ExportSessions(maxBytes int) ([]byte, int) {
	if r.sessions == nil {
		return nil, 0
	}
	return r.sessions.export(r.now(), maxBytes)
}

func (s *sessions) export(now time.Time, maxBytes int) ([]byte, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// From the most recent back: the bindings that fit and have time left.
	size := len(sessionSnapMagic) + 1 + uvarintLen(uint64(s.lru.Len()))
	n := 0
	var last *list.Element
	for e := s.lru.Front(); e != nil; e = e.Next() {
		b := e.Value.(*binding)
		if s.ttl-now.Sub(b.used) <= 0 {
			break // the rest are older still
		}
		sz := uvarintLen(uint64(len(b.id))) + len(b.id) + uvarintLen(uint64(len(b.worker))) + len(b.worker) +
			uvarintLen(uint64((s.ttl - now.Sub(b.used)).Milliseconds()))
		if maxBytes > 0 && size+sz > maxBytes {
			break
		}
		size, n, last = size+sz, n+1, e
	}
	out := make([]byte, 0, size)
	out = append(out, sessionSnapMagic...)
	out = append(out, sessionSnapVersion)
	out = binary.AppendUvarint(out, uint64(n))
	for e := last; n > 0 && e != nil; e = e.Prev() { // least recently used first
		b := e.Value.(*binding)
		out = appendSnapString(out, b.id)
		out = appendSnapString(out, b.worker)
		out = binary.AppendUvarint(out, uint64((s.ttl - now.Sub(b.used)).Milliseconds()))
	}
	return out, n
}

// uvarintLen is the length of v as a uvarint.
func uvarintLen(v uint64) int { return (bits.Len64(v|1) + 6) / 7 }

func appendSnapString(dst []byte, s string) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(s))), s...)
}

// ImportSessions adds a peer's session snapshot (ExportSessions) to this router's table and
// returns how many bindings it added. The whole snapshot is checked before anything is added:
// a malformed one, or one of another version, is an error naming the part that is wrong, and
// adds nothing. Each binding expires when its remaining time ends on this router's clock, or
// after this router's TTL if that is shorter; a session this router has bound already keeps
// its own binding; past the table's bound the least recently used go first. With affinity off
// it adds nothing.
func (r *Router) ImportSessions(data []byte) (int, error) {
	entries, err := decodeSessions(data)
	if err != nil {
		return 0, err
	}
	if r.sessions == nil {
		return 0, nil
	}
	return r.sessions.importEntries(entries, r.now()), nil
}

func (s *sessions) importEntries(entries []sessionEntry, now time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, e := range entries {
		if _, ok := s.ids[e.id]; ok || e.remaining <= 0 {
			continue
		}
		used := now.Add(min(e.remaining, s.ttl) - s.ttl) // so that it expires e.remaining from now
		if s.lru.Len() >= s.max {
			s.remove(s.lru.Back())
			s.evicted.Add(1)
		}
		s.ids[e.id] = s.lru.PushFront(&binding{id: e.id, worker: e.worker, used: used})
		n++
	}
	return n
}

var errSnapShort = errors.New("truncated")

// decodeSessions parses a session snapshot. Every count is checked against the bytes left
// before anything is allocated, so a hostile input costs at most its own size.
func decodeSessions(b []byte) ([]sessionEntry, error) {
	fail := func(field string, err error) ([]sessionEntry, error) {
		return nil, fmt.Errorf("route: session snapshot: %s: %w", field, err)
	}
	if len(b) < len(sessionSnapMagic)+1 || string(b[:len(sessionSnapMagic)]) != sessionSnapMagic {
		return fail("magic", errors.New("not a session snapshot"))
	}
	if v := b[len(sessionSnapMagic)]; v != sessionSnapVersion {
		return fail("version", fmt.Errorf("%d; this router reads version %d (a newer peer: start it from a peer of this version, or without session bindings)", v, sessionSnapVersion))
	}
	b = b[len(sessionSnapMagic)+1:]
	uv := func(field string, limit uint64) (uint64, error) {
		v, k := binary.Uvarint(b)
		if k <= 0 {
			return 0, fmt.Errorf("%s: %w", field, errSnapShort)
		}
		if v > limit {
			return 0, fmt.Errorf("%s: %d is above %d", field, v, limit)
		}
		b = b[k:]
		return v, nil
	}
	str := func(field string, limit int) (string, error) {
		l, err := uv(field, uint64(limit))
		if err != nil {
			return "", err
		}
		if l == 0 {
			return "", fmt.Errorf("%s: empty", field)
		}
		if int(l) > len(b) {
			return "", fmt.Errorf("%s: %w", field, errSnapShort)
		}
		s := string(b[:l])
		b = b[l:]
		return s, nil
	}
	n, err := uv("count", uint64(len(b)/5)) // an entry takes at least 5 bytes
	if err != nil {
		return fail("header", err)
	}
	out := make([]sessionEntry, 0, n)
	for i := range n {
		var e sessionEntry
		var err error
		var ms uint64
		if e.id, err = str("session", MaxSessionIDBytes); err == nil {
			if e.worker, err = str("worker", maxSessionWorkerBytes); err == nil {
				ms, err = uv("remaining_ms", uint64(maxSessionRemaining/time.Millisecond))
			}
		}
		if err != nil {
			return fail(fmt.Sprintf("entry %d", i), err)
		}
		e.remaining = time.Duration(ms) * time.Millisecond
		out = append(out, e)
	}
	if len(b) != 0 {
		return fail("end", fmt.Errorf("%d trailing bytes", len(b)))
	}
	return out, nil
}
