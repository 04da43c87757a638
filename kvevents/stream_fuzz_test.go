package kvevents

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/zeebo/xxh3"
)

// FuzzStream feeds the stream machine arbitrary input sequences and checks its invariants:
// no panic; the pending buffer stays within its bound; without an intervening clear, every
// applied seq is exactly the previous one + 1 (starting at 0 when the stream has a replay
// endpoint; anywhere without one, where a join clears nothing), so live batches are never applied
// ahead of a replayed range and nothing is applied twice; and Apply actions only come with a
// payload seen for that seq. Seeds are the inputs of testdata/stream/*.txt.
//
// Input encoding: one op per 3 bytes [op, seq, payload tag]: op%6 = live, replay batch,
// end marker, timeout, reconnect, malformed end; seq is small so gaps, overlaps and restarts
// are frequent; the payload is "p<seq>/<tag%2>" so restarts can change payloads. A first byte
// with bit 3 set starts the stream with Resume from seq first-byte>>4 (digest of "p<seq>/0"),
// as after a warm start: then applies continue after that seq until a clear.
func FuzzStream(f *testing.F) {
	files, _ := filepath.Glob("testdata/stream/*.txt")
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(scriptToFuzz(string(data)))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		const limit = 8
		replay := len(data) == 0 || data[0]%4 != 0
		st := NewStream(StreamOptions{HasReplay: replay, PendingMessages: limit})
		next, anyApplied := uint64(0), false
		if len(data) > 0 && data[0]&8 != 0 {
			from := uint64(data[0] >> 4)
			next, anyApplied = from+1, true
			st.Resume(from, xxh3.Hash([]byte("p"+strconv.FormatUint(from, 10)+"/0")))
		}
		check := func(acts []Action) {
			for _, a := range acts {
				switch a.Kind {
				case ActClear:
					anyApplied = false
				case ActApply:
					if anyApplied && a.Seq != next {
						t.Fatalf("applied seq %d, want %d (no clear in between)", a.Seq, next)
					}
					// A stream with replay joins by replaying from 0 (or clears when that is
					// lost); one without replay applies its first seq as it comes, since nothing
					// applied before could be stale.
					if replay && !anyApplied && a.Seq != next && next == 0 && !sawClear(st) {
						t.Fatalf("first apply is seq %d, want 0", a.Seq)
					}
					if want := "p" + strconv.FormatUint(a.Seq, 10) + "/"; !strings.HasPrefix(string(a.Payload), want) {
						t.Fatalf("apply %d carries payload %q", a.Seq, a.Payload)
					}
					next, anyApplied = a.Seq+1, true
				}
			}
			if p := st.State().Pending; p > limit {
				t.Fatalf("pending %d over the bound %d", p, limit)
			}
		}
		for i := 0; i+2 < len(data); i += 3 {
			seq := uint64(data[i+1] % 32)
			payload := []byte("p" + strconv.FormatUint(seq, 10) + "/" + strconv.Itoa(int(data[i+2]%2)))
			switch data[i] % 6 {
			case 0:
				check(st.Live(seq, payload))
			case 1:
				check(st.ReplayBatch(seq, payload))
			case 2:
				check(st.EndReplay(EndMarker))
			case 3:
				check(st.EndReplay(EndTimeout))
			case 4:
				check(st.Reconnect())
			case 5:
				check(st.EndReplay(EndMalformed))
			}
		}
	})
}

func sawClear(st *Stream) bool { return st.State().Clears > 0 }

// scriptToFuzz turns a stream script into FuzzStream's input encoding (ranges expanded).
func scriptToFuzz(script string) []byte {
	out := []byte{1}
	for _, line := range strings.Split(script, "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || strings.HasPrefix(line, " ") || strings.HasPrefix(line, "#") {
			continue
		}
		op := map[string]byte{"live": 0, "replay": 1, "reconnect": 4}[fields[0]]
		if fields[0] == "reconnect" {
			out = append(out, 4, 0, 0)
			continue
		}
		msgs, _ := parseMsgs(withoutEnd(fields[1:]))
		for _, m := range msgs {
			tag := byte(0)
			if !strings.HasPrefix(string(m.payload), "p") {
				tag = 1
			}
			out = append(out, op, byte(m.seq), tag)
		}
		if fields[0] == "replay" && len(fields) > 1 {
			switch fields[len(fields)-1] {
			case "end":
				out = append(out, 2, 0, 0)
			case "timeout", "failed":
				out = append(out, 3, 0, 0)
			case "malformed":
				out = append(out, 5, 0, 0)
			}
		}
	}
	return out
}

func withoutEnd(items []string) []string {
	if n := len(items); n > 0 {
		if _, ok := scriptEnds[items[n-1]]; ok {
			return items[:n-1]
		}
	}
	return items
}
