package kvindex

import (
	"math/rand/v2"
	"testing"
)

// TestTablesMatchMap churns both hash tables with inserts and backward-shift deletes, against a
// Go map, with clustered (sequential) and random hashes.
func TestTablesMatchMap(t *testing.T) {
	for _, clustered := range []bool{true, false} {
		r := rand.New(rand.NewPCG(13, 14))
		draw := func() uint64 {
			if clustered {
				return uint64(r.IntN(3000))
			}
			return r.Uint64()%3000*0x9e3779b97f4a7c15 + 1
		}
		var eh ehTable
		var kr keyRows = newKeyRows()
		want := map[uint64]uint32{}
		for i := range 200000 {
			k := draw()
			if _, ok := want[k]; ok && r.IntN(2) == 0 {
				at := eh.find(k)
				if at < 0 || eh.slots[at].ref != want[k] {
					t.Fatalf("op %d: ehTable.find(%d) = %d, want ref %d", i, k, at, want[k])
				}
				eh.delete(at)
				kr.unset(want[k], GPU, 0)
				delete(want, k)
				continue
			}
			if _, ok := want[k]; ok {
				continue
			}
			at, found := eh.slot(k)
			if found {
				t.Fatalf("op %d: ehTable.slot(%d) found an absent hash", i, k)
			}
			ref := kr.findOrAdd(k)
			kr.set(ref, GPU, 0)
			eh.put(at, k, ref)
			want[k] = ref
		}
		if eh.len() != len(want) || kr.len() != len(want) {
			t.Fatalf("clustered=%v: lengths %d, %d, want %d", clustered, eh.len(), kr.len(), len(want))
		}
		for k, ref := range want {
			if at := eh.find(k); at < 0 || eh.slots[at].ref != ref {
				t.Fatalf("clustered=%v: ehTable lost %d", clustered, k)
			}
			if got, ok := kr.find(k); !ok || got != ref || kr.key(got) != k {
				t.Fatalf("clustered=%v: keyTable lost %d", clustered, k)
			}
		}
		for k := range uint64(4000) {
			if _, ok := want[k]; !ok && eh.find(k) >= 0 {
				t.Fatalf("clustered=%v: ehTable finds absent %d", clustered, k)
			}
		}
	}
}
