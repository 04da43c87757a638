package kvindex

import "github.com/condisagg/condisagg/internal/openaddr"

// Open-addressing hash tables with linear probing and backward-shift deletion (no tombstones,
// so heavy store/remove churn never lengthens probe sequences). Both grow by doubling when more
// than 3/4 full and never shrink, except through reset. ehTable is an internal/openaddr table;
// keyTable is its own layout (it stores no key, only a hash fragment and a row, and compares
// keys in the rows), kept apart for the memory and the speed of Overlap.

const (
	minTableSize = 16
	fibMul       = 0x9e3779b97f4a7c15 // 2^64 / golden ratio: Fibonacci hashing
)

// An ehTable slot's meta word: bits 0-29 hold row+1, or metaExcluded for an excluded entry;
// bits 30-31 hold refcount-1 for refcounts 1 to 3, and 3 when the refcount (4 or more) is kept
// in the table's overflow map. maxRefs keeps row+1 below metaExcluded.
const (
	metaRowMask  = 1<<30 - 1
	metaExcluded = metaRowMask
	metaRCShift  = 30
	metaRCMap    = 3
)

// ehTable maps engine hashes to entries {key row, refcount} for one worker and medium: an
// openaddr.Table of meta words (12 bytes a slot; inserting a new hash reads only the meta
// array) plus the overflow map of large refcounts.
type ehTable struct {
	tab openaddr.Table[uint32] // engine hash -> meta word (the fields above; never 0)
	rc  map[uint64]uint32      // refcounts of 4 or more, by engine hash; usually nil
}

// len returns the number of entries.
func (t *ehTable) len() int { return t.tab.Len() }

// empty reports whether t has no slots yet.
func (t *ehTable) empty() bool { return t.tab.Cap() == 0 }

// find returns the slot index of eh, or -1. The index is valid until the next put or delete.
func (t *ehTable) find(eh uint64) int { return t.tab.Find(eh) }

// slot returns the slot index of eh and true, or the empty slot where eh belongs and false;
// fill that with put before any other change to t. It grows t first if needed.
func (t *ehTable) slot(eh uint64) (int, bool) { return t.tab.Slot(eh) }

// put stores a new entry for eh with one reference to ref (or excludedRef) at the empty slot i
// from slot.
func (t *ehTable) put(i int, eh uint64, ref uint32) {
	field := uint32(metaExcluded)
	if ref != excludedRef {
		field = ref + 1
	}
	t.tab.Put(i, eh, field)
}

// ref returns the row of the entry at slot i, or excludedRef.
func (t *ehTable) ref(i int) uint32 { return metaRef(*t.tab.Value(i)) }

// metaRef returns the row of a meta word, or excludedRef.
func metaRef(meta uint32) uint32 {
	if f := meta & metaRowMask; f != metaExcluded {
		return f - 1
	}
	return excludedRef
}

// addRef adds one reference to the entry at slot i.
func (t *ehTable) addRef(i int) {
	meta := t.tab.Value(i)
	switch c := *meta >> metaRCShift; {
	case c < 2:
		*meta += 1 << metaRCShift
	case c == 2:
		*meta |= metaRCMap << metaRCShift
		if t.rc == nil {
			t.rc = make(map[uint64]uint32)
		}
		t.rc[t.tab.Key(i)] = 4
	default:
		t.rc[t.tab.Key(i)]++
	}
}

// setRefs sets the reference count (>= 1) of the new entry at slot i, which holds one.
func (t *ehTable) setRefs(i int, refs uint32) {
	meta := t.tab.Value(i)
	if refs <= metaRCMap {
		*meta = *meta&metaRowMask | (refs-1)<<metaRCShift
		return
	}
	*meta |= metaRCMap << metaRCShift
	if t.rc == nil {
		t.rc = make(map[uint64]uint32)
	}
	t.rc[t.tab.Key(i)] = refs
}

// dropRef removes one reference from the entry at slot i and reports whether it was the last;
// the caller then deletes the entry.
func (t *ehTable) dropRef(i int) bool {
	meta := t.tab.Value(i)
	switch c := *meta >> metaRCShift; {
	case c == 0:
		return true
	case c < metaRCMap:
		*meta -= 1 << metaRCShift
	default:
		eh := t.tab.Key(i)
		if n := t.rc[eh] - 1; n > 3 {
			t.rc[eh] = n
		} else {
			delete(t.rc, eh)
			*meta = *meta&metaRowMask | 2<<metaRCShift
		}
	}
	return false
}

// delete removes the entry at slot index at, as returned by find.
func (t *ehTable) delete(at int) { t.tab.Delete(at) }

// each calls f with the row (or excludedRef) of every entry.
func (t *ehTable) each(f func(ref uint32)) {
	for _, meta := range t.tab.All() {
		f(metaRef(meta))
	}
}

// touch loads the home slot of eh (a prefetch) and returns a value that depends on it.
func (t *ehTable) touch(eh uint64) uint64 { return t.tab.Touch(eh) }

// reset drops every entry, keeping the allocation unless it is large.
func (t *ehTable) reset() {
	t.tab.Clear()
	t.rc = nil
}

// keyTable maps router keys to rows of a keyRows. A slot holds the top 32 bits of the key's
// Fibonacci hash (from which its home slot follows) and ref+1 (0 = empty), so probing compares
// hashes in the table and reads a row only on a probable match.
type keyTable struct {
	slots []uint64
	n     int
	shift uint8 // 64 - log2(len(slots)), >= 32
}

func keyHash(key uint64) uint64 { return (key * fibMul) >> 32 }

func (t *keyTable) home(h32 uint64) uint64 { return h32 >> ((t.shift - 32) & 63) }

// find returns the row of key; rows is keyRows.rows.
func (t *keyTable) find(key uint64, rows []uint64) (uint32, bool) {
	if t.n == 0 {
		return 0, false
	}
	h := keyHash(key)
	mask := uint64(len(t.slots) - 1)
	for i := t.home(h); ; i = (i + 1) & mask {
		s := t.slots[i]
		if s == 0 {
			return 0, false
		}
		if s>>32 == h {
			if r := uint32(s) - 1; rows[int(r)*rowStride] == key {
				return r, true
			}
		}
	}
}

// slot returns the row of key and true, or the empty slot index where key belongs and false;
// fill it with put before any other change to t. It grows t first if needed.
func (t *keyTable) slot(key uint64, rows []uint64) (int, uint32, bool) {
	if (t.n+1)*4 > len(t.slots)*3 {
		t.grow()
	}
	h := keyHash(key)
	mask := uint64(len(t.slots) - 1)
	for i := t.home(h); ; i = (i + 1) & mask {
		s := t.slots[i]
		if s == 0 {
			return int(i), 0, false
		}
		if s>>32 == h {
			if r := uint32(s) - 1; rows[int(r)*rowStride] == key {
				return 0, r, true
			}
		}
	}
}

// put stores key with row ref at the empty slot i returned by slot.
func (t *keyTable) put(i int, key uint64, ref uint32) {
	t.slots[i] = keyHash(key)<<32 | uint64(ref+1)
	t.n++
}

// reserve grows t so that n more keys fit without another growth (Import: rows arrive
// partly in hash order, which a table doubling on the way would pile up at its start).
func (t *keyTable) reserve(n int) {
	for (t.n+n)*4 > len(t.slots)*3 {
		t.grow()
	}
}

func (t *keyTable) grow() {
	old := t.slots
	size := max(minTableSize, 2*len(old))
	t.slots = make([]uint64, size)
	t.shift = uint8(64 - log2(size))
	mask := uint64(size - 1)
	for _, s := range old {
		if s == 0 {
			continue
		}
		i := t.home(s >> 32)
		for t.slots[i] != 0 {
			i = (i + 1) & mask
		}
		t.slots[i] = s
	}
}

// delete removes row ref holding key; it must be present.
func (t *keyTable) delete(key uint64, ref uint32) {
	mask := uint64(len(t.slots) - 1)
	h := keyHash(key)
	want := h<<32 | uint64(ref+1)
	i := t.home(h)
	for t.slots[i] != want {
		i = (i + 1) & mask
	}
	for j := (i + 1) & mask; t.slots[j] != 0; j = (j + 1) & mask {
		if h := t.home(t.slots[j] >> 32); (j-h)&mask >= (j-i)&mask {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = 0
	t.n--
}

// log2 returns log2 of the power of two n.
func log2(n int) int {
	l := 0
	for n > 1 {
		n >>= 1
		l++
	}
	return l
}
