package kvevents

import (
	"math/rand/v2"
	"strconv"
	"testing"
)

// TestStreamRandomLossHealed drives the machine with a simulated publisher whose live messages
// are dropped at random and delivered with random delay (in order), and whose replay ring keeps
// everything, so a replay can run ahead of live delivery. Every batch must be applied exactly
// once, in order, with nothing cleared (§1.6 success path), whatever the interleaving of live
// messages and replies.
func TestStreamRandomLossHealed(t *testing.T) {
	var replays uint64
	for seed := uint64(1); seed <= 300; seed++ {
		r := rand.New(rand.NewPCG(seed, 7))
		st := NewStream(StreamOptions{HasReplay: true})
		const n = 300
		payload := func(s uint64) []byte { return []byte("p" + strconv.FormatUint(s, 10)) }
		var applied []uint64
		var inFlight []uint64 // published, not yet delivered live (FIFO)
		var published, replyNext, replyEnd uint64
		replaying := false
		handle := func(acts []Action) {
			for _, a := range acts {
				switch a.Kind {
				case ActApply:
					applied = append(applied, a.Seq)
				case ActReplay:
					replaying, replyNext, replyEnd = true, a.Seq, published // the ring as it is now
				case ActClear:
					t.Fatalf("seed %d: unexpected %v", seed, a)
				}
			}
		}
		for published < n || len(inFlight) > 0 || replaying {
			switch op := r.IntN(4); {
			case op == 0 && published < n:
				if r.IntN(10) > 0 { // 10% of live messages are lost
					inFlight = append(inFlight, published)
				}
				published++
			case op == 1 && len(inFlight) > 0:
				s := inFlight[0]
				inFlight = inFlight[1:]
				handle(st.Live(s, payload(s)))
			case op == 2 && replaying && replyNext < replyEnd:
				handle(st.ReplayBatch(replyNext, payload(replyNext)))
				replyNext++
			case op == 3 && replaying && replyNext == replyEnd:
				replaying = false
				handle(st.EndReplay(EndMarker))
			case published == n && len(inFlight) == 0 && !replaying:
				// drained
			}
		}
		for i, s := range applied {
			if s != uint64(i) {
				t.Fatalf("seed %d: applied[%d] = %d, want %d (applied %v)", seed, i, s, i, applied)
			}
		}
		replays += st.State().Replays
	}
	if replays < 1000 {
		t.Fatalf("only %d replays over all seeds: the simulation does not exercise gaps", replays)
	}
}
