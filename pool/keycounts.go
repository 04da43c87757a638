package pool

import "math/bits"

// keyCounts counts references per chained block key: a decode worker's active set (the keys of
// its in-flight bypass bookings). Every booking adds one reference per prompt block key and its
// release drops them, about 500 of each for an 8k-token prompt, so this sits on the decision
// path; an open-addressing table with linear probing does it in about a quarter of the time of
// a Go map (BenchmarkKeyCounts: 7.0 µs against 29.8 µs to book and release 512 keys). Deletion shifts entries back instead of leaving tombstones, so churn
// never lengthens probes. The table grows when 3/4 full and shrinks only on reset.
type keyCounts struct {
	keys   []uint64
	counts []int32 // 0 marks an empty slot
	n      int
	shift  uint8 // 64 - log2(len(keys))
}

const keyCountsMinSize = 64

// home is the first slot of k (Fibonacci hashing: the keys are hashes, but their low bits
// alone would cluster for any structured input).
func (t *keyCounts) home(k uint64) uint64 { return (k * 0x9e3779b97f4a7c15) >> (t.shift & 63) }

// len returns the number of distinct keys held.
func (t *keyCounts) len() int { return t.n }

// get returns k's count (0 when absent).
func (t *keyCounts) get(k uint64) int32 {
	if t.n == 0 {
		return 0
	}
	mask := uint64(len(t.keys) - 1)
	for i := t.home(k); ; i = (i + 1) & mask {
		if t.counts[i] == 0 {
			return 0
		}
		if t.keys[i] == k {
			return t.counts[i]
		}
	}
}

// add adds one reference to k.
func (t *keyCounts) add(k uint64) {
	if (t.n+1)*4 > len(t.keys)*3 {
		t.grow()
	}
	mask := uint64(len(t.keys) - 1)
	for i := t.home(k); ; i = (i + 1) & mask {
		if t.counts[i] == 0 {
			t.keys[i], t.counts[i] = k, 1
			t.n++
			return
		}
		if t.keys[i] == k {
			t.counts[i]++
			return
		}
	}
}

// drop removes one reference from k, and k with its last one; an absent k is ignored.
func (t *keyCounts) drop(k uint64) {
	if t.n == 0 {
		return
	}
	mask := uint64(len(t.keys) - 1)
	i := t.home(k)
	for ; t.keys[i] != k || t.counts[i] == 0; i = (i + 1) & mask {
		if t.counts[i] == 0 {
			return
		}
	}
	if t.counts[i] > 1 {
		t.counts[i]--
		return
	}
	// Backward shift: move later entries of the run into the hole when the hole lies on the
	// way from their home slot to where they are.
	for j := (i + 1) & mask; t.counts[j] != 0; j = (j + 1) & mask {
		if h := t.home(t.keys[j]); (j-h)&mask >= (j-i)&mask {
			t.keys[i], t.counts[i] = t.keys[j], t.counts[j]
			i = j
		}
	}
	t.keys[i], t.counts[i] = 0, 0
	t.n--
}

// reset empties t and gives its memory back.
func (t *keyCounts) reset() { *t = keyCounts{} }

func (t *keyCounts) grow() {
	oldKeys, oldCounts := t.keys, t.counts
	size := max(keyCountsMinSize, 2*len(oldKeys))
	t.keys, t.counts = make([]uint64, size), make([]int32, size)
	t.shift = uint8(64 - bits.Len(uint(size-1))) // size is a power of two
	mask := uint64(size - 1)
	for j, c := range oldCounts {
		if c == 0 {
			continue
		}
		i := t.home(oldKeys[j])
		for t.counts[i] != 0 {
			i = (i + 1) & mask
		}
		t.keys[i], t.counts[i] = oldKeys[j], c
	}
}
