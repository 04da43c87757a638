// Package openaddr is the open-addressing hash table of the router's hot paths: uint64 keys
// (block hashes, chained block keys) to small integer values, with linear probing, Fibonacci
// hashing and backward-shift deletion (no tombstones, so heavy insert/delete churn never
// lengthens probe sequences). kvindex keeps each worker's engine hashes in one, pool each
// decode worker's active block keys.
//
// A zero value marks an empty slot, so the values stored must be non-zero; callers encode
// their payload accordingly (a count from 1, a row + 1). The table grows by doubling when more
// than 3/4 full and shrinks only through Clear or its zero value.
//
// A Table is not safe for concurrent use; its owner's lock guards it. It does no I/O and
// imports nothing of the project.
package openaddr

import (
	"iter"
	"math/bits"
)

// Value is the type of a table's values; the zero value marks an empty slot.
type Value interface {
	~int32 | ~uint32 | ~int64 | ~uint64
}

const (
	minSize = 16
	// fibMul is 2^64 divided by the golden ratio: Fibonacci hashing spreads keys whose low
	// bits alone would cluster (structured or sequential input).
	fibMul = 0x9e3779b97f4a7c15
	// clearKeep is the slot count up to which Clear keeps the allocation for reuse.
	clearKeep = 1 << 16
)

// Table maps uint64 keys to non-zero values of V in two parallel arrays. Slot indices
// (from Find and Slot) are valid until the next Put, Delete or growth. The zero value is an
// empty table.
type Table[V Value] struct {
	keys  []uint64
	vals  []V // 0 = empty slot
	n     int
	shift uint8 // 64 - log2(len(vals))
}

func (t *Table[V]) home(k uint64) uint64 { return (k * fibMul) >> (t.shift & 63) }

// Len returns the number of entries.
func (t *Table[V]) Len() int { return t.n }

// Cap returns the number of slots (0 until the first Slot).
func (t *Table[V]) Cap() int { return len(t.vals) }

// Find returns the slot index of k, or -1.
func (t *Table[V]) Find(k uint64) int {
	if t.n == 0 {
		return -1
	}
	mask := uint64(len(t.vals) - 1)
	for i := t.home(k); ; i = (i + 1) & mask {
		if t.vals[i] == 0 {
			return -1
		}
		if t.keys[i] == k {
			return int(i)
		}
	}
}

// Get returns k's value, or 0 when k is absent.
func (t *Table[V]) Get(k uint64) V {
	if t.n == 0 {
		return 0
	}
	mask := uint64(len(t.vals) - 1)
	for i := t.home(k); ; i = (i + 1) & mask {
		if v := t.vals[i]; v == 0 || t.keys[i] == k {
			return v
		}
	}
}

// Slot returns the slot index of k and true, or the empty slot where k belongs and false;
// fill that with Put before any other change to t. It grows t first if needed.
func (t *Table[V]) Slot(k uint64) (int, bool) {
	t.reserve()
	mask := uint64(len(t.vals) - 1)
	for i := t.home(k); ; i = (i + 1) & mask {
		switch {
		case t.vals[i] == 0:
			return int(i), false
		case t.keys[i] == k:
			return int(i), true
		}
	}
}

// Incr adds one to k's value, inserting k with 1 when absent. Like Decr it has a loop of its
// own: through Slot it would cost one more call.
func (t *Table[V]) Incr(k uint64) {
	t.reserve()
	mask := uint64(len(t.vals) - 1)
	for i := t.home(k); ; i = (i + 1) & mask {
		if t.vals[i] == 0 {
			t.keys[i], t.vals[i] = k, 1
			t.n++
			return
		}
		if t.keys[i] == k {
			t.vals[i]++
			return
		}
	}
}

// Decr removes one from k's value and deletes k with its last one; an absent k is left alone.
// It probes and shifts in one body, not through Find and Delete: the call to Delete cost pool's
// book-and-release of 512 keys about 10% (BenchmarkKeyCounts).
func (t *Table[V]) Decr(k uint64) {
	if t.n == 0 {
		return
	}
	mask := uint64(len(t.vals) - 1)
	hole := t.home(k)
	for ; t.keys[hole] != k || t.vals[hole] == 0; hole = (hole + 1) & mask {
		if t.vals[hole] == 0 {
			return
		}
	}
	if t.vals[hole] > 1 {
		t.vals[hole]--
		return
	}
	// Backward shift: move later entries of the run into the hole unless their home lies
	// cyclically in (hole, j].
	for j := (hole + 1) & mask; t.vals[j] != 0; j = (j + 1) & mask {
		if h := t.home(t.keys[j]); (j-h)&mask >= (j-hole)&mask {
			t.keys[hole], t.vals[hole] = t.keys[j], t.vals[j]
			hole = j
		}
	}
	t.keys[hole], t.vals[hole] = 0, 0
	t.n--
}

// reserve grows t if one more entry would fill more than 3/4 of it.
func (t *Table[V]) reserve() {
	if (t.n+1)*4 > len(t.vals)*3 {
		t.grow()
	}
}

// Put stores k with the non-zero value v at the empty slot i returned by Slot.
func (t *Table[V]) Put(i int, k uint64, v V) {
	t.keys[i], t.vals[i] = k, v
	t.n++
}

// Key returns the key at slot i.
func (t *Table[V]) Key(i int) uint64 { return t.keys[i] }

// Value returns the value at slot i, to read or change in place (never to zero: use Delete).
func (t *Table[V]) Value(i int) *V { return &t.vals[i] }

// Delete removes the entry at slot i: Decr of its key with its value set to one (Decr finds
// the key at i, at the end of its probe from the key's home slot).
func (t *Table[V]) Delete(i int) {
	t.vals[i] = 1
	t.Decr(t.keys[i])
}

// All yields every entry, in slot order.
func (t *Table[V]) All() iter.Seq2[uint64, V] {
	return func(yield func(uint64, V) bool) {
		for i, v := range t.vals {
			if v != 0 && !yield(t.keys[i], v) {
				return
			}
		}
	}
}

// Touch loads the home slot of k (a software prefetch: the misses of a batch overlap) and
// returns a value that depends on it. t must have slots (Cap > 0).
func (t *Table[V]) Touch(k uint64) uint64 {
	h := t.home(k)
	return t.keys[h] + uint64(t.vals[h])
}

// Clear drops every entry, keeping the allocation unless it is large.
func (t *Table[V]) Clear() {
	if len(t.vals) > clearKeep {
		*t = Table[V]{}
		return
	}
	clear(t.keys)
	clear(t.vals)
	t.n = 0
}

// Reserve grows t, if needed, so that n entries fit without another growth. Inserting many
// keys in the slot order of another table (which is their hash order) into a table that
// doubles on the way would pile them up at its start, every insert probing the whole pile;
// at its final size they spread out.
func (t *Table[V]) Reserve(n int) {
	size := max(minSize, len(t.vals))
	for n*4 > size*3 {
		size *= 2
	}
	if size > len(t.vals) {
		t.resize(size)
	}
}

func (t *Table[V]) grow() { t.resize(max(minSize, 2*len(t.vals))) }

// resize moves every entry into a table of size slots, a power of two.
func (t *Table[V]) resize(size int) {
	keys, vals := t.keys, t.vals
	t.keys, t.vals = make([]uint64, size), make([]V, size)
	t.shift = uint8(64 - bits.TrailingZeros(uint(size))) // size is a power of two
	mask := uint64(size - 1)
	for j, v := range vals {
		if v == 0 {
			continue
		}
		i := t.home(keys[j])
		for t.vals[i] != 0 {
			i = (i + 1) & mask
		}
		t.keys[i], t.vals[i] = keys[j], v
	}
}
