package route

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/condisagg/condisagg/policy"
)

// TestSessionTableExpiry: a binding unused for longer than the TTL is gone and counted; one
// bound again in time stays.
func TestSessionTableExpiry(t *testing.T) {
	s := newSessions(SessionConfig{Enabled: true, TTL: time.Minute, Max: 10})
	t0 := testNow
	s.bind("a", "d0", t0)
	s.bind("b", "d1", t0)
	if w := s.lookup("a", t0.Add(time.Minute)); w != "d0" {
		t.Fatalf("lookup at the TTL = %q, want d0", w)
	}
	s.bind("b", "d2", t0.Add(50*time.Second)) // the next turn refreshes the binding
	if w := s.lookup("a", t0.Add(61*time.Second)); w != "" {
		t.Fatalf("lookup past the TTL = %q, want none", w)
	}
	if w := s.lookup("b", t0.Add(61*time.Second)); w != "d2" {
		t.Fatalf("refreshed binding = %q, want d2", w)
	}
	if st := s.stats(); st.Expired != 1 || st.Bindings != 1 || st.Evicted != 0 {
		t.Fatalf("stats %+v, want 1 expired, 1 binding", st)
	}
	// Expired bindings at the LRU tail leave when a new session is bound.
	s.bind("c", "d0", t0.Add(10*time.Minute))
	if st := s.stats(); st.Expired != 2 || st.Bindings != 1 {
		t.Fatalf("stats after the tail sweep %+v, want 2 expired, 1 binding", st)
	}
}

// TestSessionTableBounded: the table never holds more than Max bindings; the least recently
// bound goes first and is counted.
func TestSessionTableBounded(t *testing.T) {
	s := newSessions(SessionConfig{Enabled: true, Max: 2})
	s.bind("a", "d0", testNow)
	s.bind("b", "d1", testNow)
	s.bind("a", "d2", testNow.Add(time.Second)) // a is now the most recent
	s.bind("c", "d0", testNow.Add(2*time.Second))
	if st := s.stats(); st.Bindings != 2 || st.Evicted != 1 {
		t.Fatalf("stats %+v, want 2 bindings, 1 evicted", st)
	}
	if s.lookup("b", testNow.Add(3*time.Second)) != "" || s.lookup("a", testNow.Add(3*time.Second)) != "d2" {
		t.Fatal("the least recently bound session (b) should be the one evicted")
	}
	for i := range 1000 {
		s.bind(strconv.Itoa(i), "d0", testNow.Add(3*time.Second))
	}
	if st := s.stats(); st.Bindings != 2 || st.Evicted != 1001 || len(s.ids) != 2 {
		t.Fatalf("stats %+v (map %d), want 2 bindings and 1001 evicted", st, len(s.ids))
	}
	if newSessions(SessionConfig{}) != nil {
		t.Fatal("a disabled config must keep no table")
	}
}

// TestRouterSessionAffinity: a follow-up sent while the previous turn still holds its booking
// (no KV in the index yet) goes to the previous turn's worker, though the load selection
// would spread it; without affinity it spreads. Dry runs (Explain) neither bind nor count.
func TestRouterSessionAffinity(t *testing.T) {
	ctx := context.Background()
	run := func(t *testing.T, sessions SessionConfig, now func() time.Time) (*Router, []Outcome) {
		r, _ := testRouterWith(t, Options{Sessions: sessions, Now: now})
		var outs []Outcome
		for i, s := range []string{"s1", "s1", "", "s1"} {
			out, err := r.Decide(ctx, &Request{Tokens: prompt(600 + 16*i), Session: s})
			if err != nil {
				t.Fatal(err)
			}
			outs = append(outs, out)
		}
		return r, outs
	}
	clock := testNow
	now := func() time.Time { return clock }
	_, off := run(t, SessionConfig{}, now)
	if off[1].Decode.ID == off[0].Decode.ID {
		t.Fatalf("without affinity the second request should spread by load, both went to %s", off[0].Decode.ID)
	}
	if off[1].Session != (Session{}) || off[1].Record().Session != "" {
		t.Fatalf("affinity off records a session: %+v", off[1].Session)
	}
	r, on := run(t, SessionConfig{Enabled: true}, now)
	first := on[0].Decode.ID
	for _, i := range []int{1, 3} {
		if on[i].Decode.ID != first || on[i].Session.Outcome != policy.AffinityHit || on[i].Session.Bound != first {
			t.Fatalf("turn %d: decode %s session %+v, want a hit on %s", i, on[i].Decode.ID, on[i].Session, first)
		}
	}
	if on[0].Session.Outcome != policy.AffinityMiss || on[0].Record().Session != "miss" || on[1].Record().Session != "hit" {
		t.Fatalf("first turn %+v record %q", on[0].Session, on[0].Record().Session)
	}
	if on[2].Session != (Session{}) {
		t.Fatalf("a request without a session got %+v", on[2].Session)
	}
	st := r.SessionStats()
	if st.Outcomes[policy.AffinityMiss] != 1 || st.Outcomes[policy.AffinityHit] != 2 || st.Bindings != 1 {
		t.Fatalf("stats %+v", st)
	}
	dry, err := r.Decide(ctx, &Request{Tokens: prompt(700), Session: "s2", DryRun: true})
	if err != nil || dry.Session.Outcome != policy.AffinityMiss {
		t.Fatalf("dry run: %+v %v", dry.Session, err)
	}
	if st2 := r.SessionStats(); st2 != st {
		t.Fatalf("a dry run changed the table: %+v, was %+v", st2, st)
	}
	// Past the TTL the binding is gone: a miss, counted as expired.
	clock = clock.Add(DefaultSessionTTL + time.Second)
	out, err := r.Decide(ctx, &Request{Tokens: prompt(900), Session: "s1"})
	if err != nil || out.Session.Outcome != policy.AffinityMiss || out.Session.Bound != "" {
		t.Fatalf("after the TTL: %+v %v", out.Session, err)
	}
	if st := r.SessionStats(); st.Expired != 1 {
		t.Fatalf("expired %d, want 1", st.Expired)
	}
	if _, err := New(Options{Sessions: SessionConfig{TTL: -1}}); err == nil {
		t.Fatal("a negative TTL must be refused")
	}
}
