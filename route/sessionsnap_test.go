package route

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/condisagg/condisagg/policy"
)

// TestSessionSnapshotCarriesRemainingTime: bindings travel with the time they have left, which
// the importer counts on its own clock (an hour off the exporter's here), in LRU order; the
// importer's shorter TTL caps it; a session it has bound already keeps its own binding;
// maxBytes keeps the most recent; expired bindings stay behind.
func TestSessionSnapshotCarriesRemainingTime(t *testing.T) {
	src := newSessions(SessionConfig{Enabled: true, TTL: 10 * time.Minute, Max: 100})
	t0 := testNow
	src.bind("old", "d0", t0)                     // expires at t0+10m: gone at the export
	src.bind("a", "d1", t0.Add(5*time.Minute))    // 2 min left at the export
	src.bind("b", "d2", t0.Add(7*time.Minute))    // 4 min left
	src.bind("c", "d0", t0.Add(10*time.Minute+1)) // 9 min left (just under 10)
	exportAt := t0.Add(13 * time.Minute)
	data, n := src.export(exportAt, 0)
	if n != 3 {
		t.Fatalf("exported %d bindings, want 3 (the expired one left out)", n)
	}
	entries, err := decodeSessions(data)
	if err != nil {
		t.Fatal(err)
	}
	if got := []string{entries[0].id, entries[1].id, entries[2].id}; !reflect.DeepEqual(got, []string{"a", "b", "c"}) {
		t.Fatalf("order %v, want least recently used first", got)
	}

	dstNow := exportAt.Add(time.Hour) // another clock
	dst := newSessions(SessionConfig{Enabled: true, TTL: 5 * time.Minute, Max: 100})
	dst.bind("b", "d9", dstNow) // bound here already: kept
	if got := dst.importEntries(entries, dstNow); got != 2 {
		t.Fatalf("imported %d, want 2", got)
	}
	for _, c := range []struct {
		id     string
		after  time.Duration
		worker string
	}{
		{"a", 2*time.Minute - time.Second, "d1"}, {"a", 2*time.Minute + time.Second, ""},
		{"b", 4 * time.Minute, "d9"},
		// 9 minutes left on the exporter, capped at the importer's 5-minute TTL.
		{"c", 5*time.Minute - time.Second, "d0"}, {"c", 5*time.Minute + time.Second, ""},
	} {
		if w := dst.lookup(c.id, dstNow.Add(c.after)); w != c.worker {
			t.Errorf("%s after %v: %q, want %q", c.id, c.after, w, c.worker)
		}
	}

	// A small table keeps the most recently used.
	small := newSessions(SessionConfig{Enabled: true, TTL: 10 * time.Minute, Max: 2})
	small.importEntries(entries, dstNow)
	if small.lookup("a", dstNow) != "" || small.lookup("b", dstNow) != "d2" || small.lookup("c", dstNow) != "d0" {
		t.Error("a table of 2 should keep b and c, the most recent")
	}
	// maxBytes keeps the most recent that fit.
	part, n := src.export(exportAt, len(data)-1)
	if n != 2 || len(part) >= len(data) {
		t.Fatalf("maxBytes %d: %d bindings in %d bytes, want 2", len(data)-1, n, len(part))
	}
	if es, _ := decodeSessions(part); es[0].id != "b" || es[1].id != "c" {
		t.Errorf("maxBytes kept %+v, want b and c", es)
	}
}

// TestSessionSnapshotRefusals: a damaged or foreign snapshot is refused whole, with an error
// naming the part.
func TestSessionSnapshotRefusals(t *testing.T) {
	s := newSessions(SessionConfig{Enabled: true})
	s.bind("sess-1", "d0", testNow)
	good, _ := s.export(testNow, 0)
	hdr := len(sessionSnapMagic) + 1
	for _, c := range []struct {
		name string
		in   []byte
		want string
	}{
		{"empty", nil, "magic: not a session snapshot"},
		{"index_snapshot", []byte("cdkvix\x01\x10"), "magic: not a session snapshot"},
		{"newer_version", append([]byte(sessionSnapMagic+"\x02"), good[hdr:]...), "version: 2; this router reads version 1"},
		{"huge_count", append([]byte(sessionSnapMagic+"\x01"), 0xff, 0xff, 0x03), "header: count: 65535 is above 0"},
		{"truncated", good[:len(good)-1], "entry 0: remaining_ms: truncated"},
		{"truncated_worker", good[:len(good)-5], "entry 0: worker: truncated"},
		{"empty_session", []byte(sessionSnapMagic + "\x01\x01\x00\x02d0\x05"), "entry 0: session: empty"},
		{"long_session", append(append([]byte(sessionSnapMagic+"\x01\x01"), 0x81, 0x02), make([]byte, 300)...), "entry 0: session: 257 is above 256"},
		{"trailing", append(append([]byte{}, good...), 0), "end: 1 trailing bytes"},
	} {
		_, err := decodeSessions(c.in)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
	}
	r, _ := testRouterWith(t, Options{Sessions: SessionConfig{Enabled: true}, Now: func() time.Time { return testNow }})
	if n, err := r.ImportSessions(good[:len(good)-1]); err == nil || n != 0 || r.SessionStats().Bindings != 0 {
		t.Errorf("a damaged snapshot: %d imported, %v; want an error and nothing added", n, err)
	}
}

// FuzzDecodeSessions: no panic, allocation bounded by the input, and what decodes re-encodes
// to the same entries.
func FuzzDecodeSessions(f *testing.F) {
	s := newSessions(SessionConfig{Enabled: true})
	s.bind("a", "d0", testNow)
	s.bind("conversation-42", "decode-1/dp3", testNow.Add(time.Minute))
	good, _ := s.export(testNow.Add(2*time.Minute), 0)
	f.Add(good)
	f.Add([]byte(sessionSnapMagic + "\x01\x00"))
	f.Fuzz(func(t *testing.T, in []byte) {
		es, err := decodeSessions(in)
		if err != nil {
			return
		}
		if len(es)*5 > len(in) {
			t.Fatalf("%d entries from %d bytes", len(es), len(in))
		}
		out := []byte(sessionSnapMagic + "\x01")
		out = appendUvarintForTest(out, len(es))
		for _, e := range es {
			out = appendSnapString(out, e.id)
			out = appendSnapString(out, e.worker)
			out = appendUvarintForTest(out, int(e.remaining/time.Millisecond))
		}
		again, err := decodeSessions(out)
		if err != nil || !reflect.DeepEqual(again, es) {
			t.Fatalf("re-decode: %v\n%+v\n%+v", err, again, es)
		}
	})
}

func appendUvarintForTest(b []byte, v int) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// TestWarmRouterKeepsFollowUps: a router that imported its peer's sessions sends every
// session's follow-up to the worker the peer would (the worker of its last turn), while a
// router without them spreads the follow-ups by load. The routers share no pool or index
// (nothing cached, no load: only the bindings can agree), and their clocks are an hour apart.
func TestWarmRouterKeepsFollowUps(t *testing.T) {
	ctx := context.Background()
	on := SessionConfig{Enabled: true}
	peerNow := testNow
	peer, _ := testRouterWith(t, Options{Sessions: on, Now: func() time.Time { return peerNow }})
	const sessions = 24
	for i := range sessions { // first turns, booked: load spreads them over the decode workers
		out, err := peer.Decide(ctx, &Request{Tokens: prompt(400 + 16*i), Session: fmt.Sprintf("conv-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		defer out.Ticket.Cancel()
	}
	peerNow = peerNow.Add(time.Minute)
	data, n := peer.ExportSessions(1 << 20)
	if n != sessions {
		t.Fatalf("exported %d bindings, want %d", n, sessions)
	}
	warmNow := testNow.Add(time.Hour)
	warm, _ := testRouterWith(t, Options{Sessions: on, Now: func() time.Time { return warmNow }})
	if got, err := warm.ImportSessions(data); err != nil || got != sessions {
		t.Fatalf("ImportSessions: %d, %v", got, err)
	}
	cold, _ := testRouterWith(t, Options{Sessions: on, Now: func() time.Time { return warmNow }})
	followUp := func(r *Router, i int) Outcome {
		t.Helper()
		out, err := r.Decide(ctx, &Request{Tokens: prompt(400 + 16*i + 64), Session: fmt.Sprintf("conv-%d", i), DryRun: true})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	same, coldSame := 0, 0
	workers := map[string]bool{}
	for i := range sessions {
		p, w, c := followUp(peer, i), followUp(warm, i), followUp(cold, i)
		workers[p.Decode.ID] = true
		if w.Decode.ID == p.Decode.ID && w.Session.Outcome == policy.AffinityHit {
			same++
		}
		if c.Decode.ID == p.Decode.ID {
			coldSame++
		}
	}
	t.Logf("follow-ups on the peer's worker: warm %d/%d, cold %d/%d (peer used %d workers)", same, sessions, coldSame, sessions, len(workers))
	if same != sessions {
		t.Errorf("warm router: %d of %d follow-ups on the peer's worker, want all", same, sessions)
	}
	if len(workers) < 2 || coldSame == sessions {
		t.Errorf("the test cannot tell: the peer used %d workers, the cold router agreed on %d of %d", len(workers), coldSame, sessions)
	}
	// Expiry runs on the warm router's clock from the remaining time (TTL 30 min, a minute used).
	warmNow = warmNow.Add(DefaultSessionTTL - time.Minute + time.Second)
	if out := followUp(warm, 0); out.Session.Bound != "" {
		t.Errorf("a binding imported with %v left is still bound after it: %+v", DefaultSessionTTL-time.Minute, out.Session)
	}
}
