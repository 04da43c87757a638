package pool

import (
	"math/rand/v2"
	"testing"
)

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
