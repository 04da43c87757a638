package openaddr

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"
)

// TestTableMatchesMap churns a table with inserts, in-place updates and backward-shift
// deletes against a Go map (the naive version), with clustered (sequential) and spread keys,
// through growth and Clear.
func TestTableMatchesMap(t *testing.T) {
	for _, clustered := range []bool{true, false} {
		t.Run(fmt.Sprintf("clustered=%v", clustered), func(t *testing.T) {
			r := rand.New(rand.NewPCG(13, 14))
			draw := func() uint64 {
				if clustered {
					return uint64(r.IntN(3000))
				}
				return r.Uint64()%3000*0x9e3779b97f4a7c15 + 1
			}
			var tab Table[int32]
			want := map[uint64]int32{}
			for i := range 200000 {
				if i == 150000 {
					tab.Clear()
					clear(want)
				}
				k := draw()
				at, found := tab.Slot(k)
				if _, ok := want[k]; ok != found {
					t.Fatalf("op %d: Slot(%d) found=%v, want %v", i, k, found, ok)
				}
				switch {
				case !found:
					tab.Put(at, k, 1)
					want[k] = 1
				case r.IntN(3) == 0:
					*tab.Value(at) += 1
					want[k]++
				default:
					if tab.Key(at) != k || *tab.Value(at) != want[k] {
						t.Fatalf("op %d: slot of %d holds %d=%d, want %d", i, k, tab.Key(at), *tab.Value(at), want[k])
					}
					tab.Delete(at)
					delete(want, k)
				}
			}
			if tab.Len() != len(want) {
				t.Fatalf("Len = %d, want %d", tab.Len(), len(want))
			}
			for k, v := range want {
				if at := tab.Find(k); at < 0 || *tab.Value(at) != v {
					t.Fatalf("lost %d", k)
				}
			}
			for k := range uint64(4000) {
				if _, ok := want[k]; !ok && tab.Find(k) >= 0 {
					t.Fatalf("finds absent %d", k)
				}
			}
			if got := maps.Collect(tab.All()); !maps.Equal(got, want) {
				t.Fatalf("All yields %d entries, want %d", len(got), len(want))
			}
		})
	}
}

// TestZeroValue: an empty table finds nothing, and Clear of a large table gives its memory
// back while a small one keeps it.
func TestZeroValue(t *testing.T) {
	var tab Table[uint32]
	if tab.Find(7) != -1 || tab.Len() != 0 || tab.Cap() != 0 {
		t.Fatal("zero table is not empty")
	}
	for k := range uint64(100) {
		at, _ := tab.Slot(k)
		tab.Put(at, k, uint32(k)+1)
	}
	tab.Clear()
	if tab.Len() != 0 || tab.Cap() == 0 || tab.Find(5) != -1 {
		t.Fatalf("Clear of a small table: len %d cap %d", tab.Len(), tab.Cap())
	}
	for k := range uint64(clearKeep) {
		at, _ := tab.Slot(k)
		tab.Put(at, k, 1)
	}
	tab.Clear()
	if tab.Cap() != 0 {
		t.Fatalf("Clear of a large table kept %d slots", tab.Cap())
	}
}

// BenchmarkTable adds and then deletes n spread keys (a booking's block keys).
func BenchmarkTable(b *testing.B) {
	for _, n := range []int{512, 8192} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			keys := make([]uint64, n)
			r := rand.New(rand.NewPCG(1, 2))
			for i := range keys {
				keys[i] = r.Uint64()
			}
			var tab Table[int32]
			b.ReportAllocs()
			for b.Loop() {
				for _, k := range keys {
					at, _ := tab.Slot(k)
					tab.Put(at, k, 1)
				}
				for _, k := range keys {
					tab.Delete(tab.Find(k))
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/key")
		})
	}
}

// TestCountersMatchMap runs random Incr and Decr (keys from small and colliding sets, so runs
// form and backward shifts happen) against a Go map, comparing every count and the length.
func TestCountersMatchMap(t *testing.T) {
	for _, universe := range []int{8, 300, 5000} {
		rng := rand.New(rand.NewPCG(uint64(universe), 3))
		var kc Table[int32]
		ref := map[uint64]int32{}
		keys := make([]uint64, universe)
		for i := range keys {
			// Half the keys are structured (i << 40, low bits all zero) rather than random.
			keys[i] = rng.Uint64()
			if i%2 == 0 {
				keys[i] = uint64(i) << 40
			}
		}
		for step := range 200000 {
			k := keys[rng.IntN(universe)]
			if rng.IntN(2) == 0 {
				kc.Incr(k)
				ref[k]++
			} else {
				kc.Decr(k)
				if ref[k] > 1 {
					ref[k]--
				} else {
					delete(ref, k)
				}
			}
			if step%997 == 0 {
				if kc.Len() != len(ref) {
					t.Fatalf("universe %d step %d: len %d, want %d", universe, step, kc.Len(), len(ref))
				}
				for _, k := range keys {
					if got, want := kc.Get(k), ref[k]; got != want {
						t.Fatalf("universe %d step %d: count of %#x = %d, want %d", universe, step, k, got, want)
					}
				}
			}
		}
		kc = Table[int32]{}
		if kc.Len() != 0 || kc.Get(keys[0]) != 0 {
			t.Fatal("the zero value holds keys")
		}
		kc.Decr(keys[0]) // dropping from an empty table is a no-op
		kc.Incr(0)       // key 0 is a key like any other
		if kc.Get(0) != 1 || kc.Len() != 1 {
			t.Fatalf("key 0: count %d len %d", kc.Get(0), kc.Len())
		}
	}
}
