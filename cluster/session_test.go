package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/condisagg/condisagg/route"
	"github.com/condisagg/condisagg/workload"
)

// TestSessionsFollowPreviousTurn: a follow-up sent while its previous turn still decodes (its
// KV not in the index yet, the worker loaded by it) goes to that worker only with session
// affinity; the report counts it, and the trace names each request's session.
func TestSessionsFollowPreviousTurn(t *testing.T) {
	turn := func(index int, arrival time.Duration, session int64, parent int, parts ...[2]int) workload.Request {
		r := req(index, arrival, 400, parts...)
		r.Session, r.Parent = session, parent
		if parent >= 0 {
			r.Turn = 1
		}
		return r
	}
	reqs := []workload.Request{
		turn(0, 0, 0, -1, [2]int{1, 4096}),
		// Session 0's next turn arrives 10 ms later, while turn 0 still decodes.
		turn(1, 10*time.Millisecond, 0, 0, [2]int{1, 4096}, [2]int{3, 200}),
	}
	run := func(s route.SessionConfig) (*Report, []string) {
		var sessions []string
		rep, err := Run(context.Background(), Config{Decode: 2, Mode: Aggregated, Sessions: s, EventDelay: time.Second}, reqs,
			Options{Trace: func(op Op) {
				if op.Kind == OpDecide {
					sessions = append(sessions, op.Session)
				}
			}})
		if err != nil {
			t.Fatal(err)
		}
		return rep, sessions
	}
	off, sessions := run(route.SessionConfig{})
	if off.Decisions[1].Decode == off.Decisions[0].Decode || off.Sessions.FollowUps != 1 || off.Sessions.OnPrevious != 0 {
		t.Fatalf("without affinity the follow-up should spread by load: %s then %s, report %+v",
			off.Decisions[0].Decode, off.Decisions[1].Decode, off.Sessions)
	}
	if len(sessions) != 2 || sessions[0] != "s0" || sessions[1] != "s0" {
		t.Fatalf("trace sessions %q", sessions)
	}
	on, _ := run(route.SessionConfig{Enabled: true})
	if on.Decisions[1].Decode != on.Decisions[0].Decode || on.Sessions.OnPrevious != 1 || on.Decisions[1].Session != "hit" {
		t.Fatalf("with affinity: %s then %s (%s), report %+v", on.Decisions[0].Decode, on.Decisions[1].Decode,
			on.Decisions[1].Session, on.Sessions)
	}
	if on.Sessions.Share() != 1 || on.Sessions.Stats.Bindings != 1 {
		t.Fatalf("report %+v", on.Sessions)
	}
}
