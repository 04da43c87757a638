package kvevents

import (
	"math/rand/v2"
	"strconv"
	"testing"
)

// TestStreamRandomLossHealed drives the machine with a simulated publisher whose live messages
// are dropped at random and whose replay ring keeps everything: every batch must be applied
// exactly once, in order, with nothing cleared (§1.6 success path), whatever the interleaving
// of live messages and replies.
func TestStreamRandomLossHealed(t *testing.T) {
	var replays uint64
	for seed := uint64(1); seed <= 200; seed++ {
		r := rand.New(rand.NewPCG(seed, 7))
		st := NewStream(StreamOptions{HasReplay: true})
		const n = 300
		payload := func(s uint64) []byte { return []byte("p" + strconv.FormatUint(s, 10)) }
		var applied []uint64
		replayFrom, replaying := uint64(0), false
		var published uint64
		handle := func(acts []Action) {
			for _, a := range acts {
				switch a.Kind {
				case ActApply:
					applied = append(applied, a.Seq)
				case ActReplay:
					replayFrom, replaying = a.Seq, true
				case ActClear:
					t.Fatalf("seed %d: unexpected %v", seed, a)
				}
			}
		}
		// pending replies of the replay in progress, delivered interleaved with live traffic
		var replyNext uint64
		replyEnd := uint64(0)
		for published < n || replaying {
			if replaying && replyEnd == 0 {
				replyNext, replyEnd = replayFrom, published // serve what the ring holds now
			}
			if published < n && (r.IntN(3) > 0 || !replaying) {
				s := published
				published++
				if r.IntN(10) > 0 { // 10% of live messages are lost
					handle(st.Live(s, payload(s)))
				}
				continue
			}
			if replyNext < replyEnd {
				handle(st.ReplayBatch(replyNext, payload(replyNext)))
				replyNext++
				continue
			}
			replaying, replyEnd = false, 0
			handle(st.EndReplay(EndMarker))
		}
		for i, s := range applied {
			if s != uint64(i) {
				t.Fatalf("seed %d: applied[%d] = %d, want %d (applied %v)", seed, i, s, i, applied)
			}
		}
		replays += st.State().Replays
		if want := st.State(); want.ExpectSet && uint64(len(applied)) != want.Expect {
			t.Fatalf("seed %d: applied %d, expect %d", seed, len(applied), want.Expect)
		}
	}
	if replays < 1000 {
		t.Fatalf("only %d replays over all seeds: the simulation does not exercise gaps", replays)
	}
}
