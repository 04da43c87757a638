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
				if at < 0 || eh.ref(at) != want[k] {
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
			ref, _ := kr.findOrAdd(k, rootRow)
			kr.set(ref, GPU, 0)
			eh.put(at, k, ref)
			want[k] = ref
		}
		if eh.len() != len(want) || kr.len() != len(want) {
			t.Fatalf("clustered=%v: lengths %d, %d, want %d", clustered, eh.len(), kr.len(), len(want))
		}
		for k, ref := range want {
			if at := eh.find(k); at < 0 || eh.ref(at) != ref {
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

// TestEHTableRefcounts drives refcounts through the in-slot range (1-3) and the overflow map
// (4 and more) and back, moving entries by deletes in between.
func TestEHTableRefcounts(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 18))
	var eh ehTable
	want := map[uint64]int{}
	for i := range 100000 {
		k := uint64(r.IntN(64)) // few hashes: long clusters, many repeats
		at, found := eh.slot(k)
		switch {
		case !found && r.IntN(2) == 0:
			eh.put(at, k, uint32(k))
			want[k] = 1
		case found && r.IntN(2) == 0:
			eh.addRef(at)
			want[k]++
		case found:
			if last := eh.dropRef(at); last != (want[k] == 1) {
				t.Fatalf("op %d: dropRef(%d) last=%v with refcount %d", i, k, last, want[k])
			} else if last {
				eh.delete(at)
				delete(want, k)
			} else {
				want[k]--
			}
		}
		if i%1000 == 0 {
			for k, n := range want {
				at := eh.find(k)
				if at < 0 || eh.ref(at) != uint32(k) {
					t.Fatalf("op %d: entry %d lost", i, k)
				}
				if got := ehRefcount(&eh, at); got != n {
					t.Fatalf("op %d: refcount of %d = %d, want %d", i, k, got, n)
				}
			}
		}
	}
	if eh.len() != len(want) {
		t.Fatalf("len = %d, want %d", eh.len(), len(want))
	}
}

// ehRefcount decodes the refcount of slot i.
func ehRefcount(t *ehTable, i int) int {
	if c := *t.tab.Value(i) >> metaRCShift; c < metaRCMap {
		return int(c) + 1
	}
	return int(t.rc[t.tab.Key(i)])
}
