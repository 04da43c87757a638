package pool

import (
	"math/rand/v2"
	"testing"
)

// TestKeyCountsMatchesMap runs random adds and drops (keys from small and colliding sets, so runs
// form and backward shifts happen) against a Go map, comparing every count and the length.
func TestKeyCountsMatchesMap(t *testing.T) {
	for _, universe := range []int{8, 300, 5000} {
		rng := rand.New(rand.NewPCG(uint64(universe), 3))
		var kc keyCounts
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
				kc.add(k)
				ref[k]++
			} else {
				kc.drop(k)
				if ref[k] > 1 {
					ref[k]--
				} else {
					delete(ref, k)
				}
			}
			if step%997 == 0 {
				if kc.len() != len(ref) {
					t.Fatalf("universe %d step %d: len %d, want %d", universe, step, kc.len(), len(ref))
				}
				for _, k := range keys {
					if got, want := kc.get(k), ref[k]; got != want {
						t.Fatalf("universe %d step %d: count of %#x = %d, want %d", universe, step, k, got, want)
					}
				}
			}
		}
		kc.reset()
		if kc.len() != 0 || kc.get(keys[0]) != 0 {
			t.Fatal("reset left keys")
		}
		kc.drop(keys[0]) // dropping from an empty table is a no-op
		kc.add(0)        // key 0 is a key like any other
		if kc.get(0) != 1 || kc.len() != 1 {
			t.Fatalf("key 0: count %d len %d", kc.get(0), kc.len())
		}
	}
}

// BenchmarkKeyCounts books and releases one 8k-token prompt's 512 keys on a worker whose active
// set holds 16 other prompts, with keyCounts and with a Go map, in the same run.
func BenchmarkKeyCounts(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	prompt := make([]uint64, 512)
	for i := range prompt {
		prompt[i] = rng.Uint64()
	}
	other := make([]uint64, 16*512)
	for i := range other {
		other[i] = rng.Uint64()
	}
	b.Run("keyCounts", func(b *testing.B) {
		var kc keyCounts
		for _, k := range other {
			kc.add(k)
		}
		for b.Loop() {
			for _, k := range prompt {
				kc.add(k)
			}
			for _, k := range prompt {
				kc.drop(k)
			}
		}
	})
	b.Run("map", func(b *testing.B) {
		m := map[uint64]int32{}
		for _, k := range other {
			m[k]++
		}
		for b.Loop() {
			for _, k := range prompt {
				m[k]++
			}
			for _, k := range prompt {
				if n := m[k]; n > 1 {
					m[k] = n - 1
				} else {
					delete(m, k)
				}
			}
		}
	})
}
