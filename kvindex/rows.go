package kvindex

// maxRefs bounds the number of live key rows (and the per-worker entry cap), so that row+1
// fits an ehTable slot's 30-bit row field below its excluded marker.
const maxRefs = 1 << 29

// excludedRef is the row reference of an excluded entry (a non-plain block, §4.2 step 5): it is
// refcounted like any entry but backs no router key.
const excludedRef = ^uint32(0)

// Row links: each row knows the row of its parent key (the key it was chained after), and its
// children form a doubly linked list, so that a removal can tell whether the worker still holds
// a child of the removed key (index.go, closed workers). noRow marks a missing link; rootRow is
// the parent of a sequence's first block; unknownRow the parent of a row whose parent key had no
// row when it was created (only for stores that continue an EH stored under another key).
const (
	noRow      = ^uint32(0)
	rootRow    = noRow - 1
	unknownRow = noRow - 2
)

// keyRows maps each router key that at least one worker holds to a row of presence bits, one
// bit per worker slot and medium.
//
// Row r occupies rows[r*rowStride:][:rowStride]: word 0 is the key, word 1 the row's inline GPU
// word. Most keys are held by few workers, so a dense GPU bitset of one word per 64 slots would
// cost 128 B per key at 1,024 workers; instead, while a row's GPU holders all lie in one 64-slot
// group, the inline word holds them and gpuAt[r] names the group. When a second group gains a
// holder the row spills: its bitset moves to dense (words words), gpuAt[r] becomes spilledGroup
// and the inline word holds the bitset's index in dense; it moves back inline when a removal
// leaves at most one group. With 64 slots or fewer there is one group and gpuAt is nil.
//
// Lower tiers are rarer, so their bitsets are always dense and live apart: when bit r of hasExt
// is set, the CPU and then the Disk bitset of row r are ext[extAt[r]*2*words:][:2*words] (a
// map, so a row without them pays one bit, not a slot).
//
// A row lives while any of its bits is set; then its key is deleted and the row goes on the free
// list (its lower-tier part as soon as that is empty). A row without bits whose key still has
// child rows stays (dead) until its last child goes, so the links stay valid; dead rows hold no
// key.
type keyRows struct {
	index     keyTable // router key -> row
	rows      []uint64
	gpuAt     []uint16 // by row, nil while words == 1: the inline word's group, or spilledGroup
	dense     []uint64 // spilled GPU bitsets, words words each
	denseFree []uint32
	hasExt    []uint64          // bit per row: the row has lower-tier bitsets
	extAt     map[uint32]uint32 // row -> index of its lower-tier bitsets in ext
	ext       []uint64
	words     int // bitset words per medium: one per 64 worker slots
	free      []uint32
	extFree   []uint32
	// By row: parent row (or rootRow, unknownRow), first child, next and previous sibling.
	parent, child, next, prev []uint32
	dead                      int // rows without bits kept for their children
}

// rowStride is the number of words of a row in keyRows.rows: the key and the inline GPU word.
const rowStride = 2

// spilledGroup is the gpuAt entry of a row whose GPU bitset lives in keyRows.dense. Groups are
// below it, so the index holds at most maxSlots worker slots.
const (
	spilledGroup = 1<<16 - 1
	maxSlots     = 64 * spilledGroup
)

func newKeyRows() keyRows {
	return keyRows{words: 1}
}

// find returns the row of key.
func (t *keyRows) find(key uint64) (uint32, bool) {
	return t.index.find(key, t.rows)
}

// key returns the router key of row r.
func (t *keyRows) key(r uint32) uint64 { return t.rows[int(r)*rowStride] }

// inline returns row r's inline GPU word and its group (the word's index in a dense bitset),
// or ok false when the row has spilled.
func (t *keyRows) inline(r uint32) (group uint32, word uint64, ok bool) {
	if t.gpuAt != nil {
		group = uint32(t.gpuAt[r])
		if group == spilledGroup {
			return 0, 0, false
		}
	}
	return group, t.rows[int(r)*rowStride+1], true
}

// spilledBits returns the dense GPU bitset of the spilled row r.
func (t *keyRows) spilledBits(r uint32) []uint64 {
	o := int(t.rows[int(r)*rowStride+1]) * t.words
	return t.dense[o : o+t.words]
}

// gpu returns row r's GPU bitset (words words). An inline row is expanded into buf, which must
// hold words words.
func (t *keyRows) gpu(r uint32, buf []uint64) []uint64 {
	g, w, ok := t.inline(r)
	if !ok {
		return t.spilledBits(r)
	}
	if t.words == 1 {
		o := int(r)*rowStride + 1
		return t.rows[o : o+1]
	}
	clear(buf)
	buf[g] = w
	return buf
}

// gpuEmpty reports whether no worker holds row r on GPU (a spilled row always has holders in
// two groups at least).
func (t *keyRows) gpuEmpty(r uint32) bool {
	_, w, ok := t.inline(r)
	return ok && w == 0
}

// hasLower reports whether row r has CPU or Disk holders.
func (t *keyRows) hasLower(r uint32) bool { return t.hasExt[r/64]&(1<<(r%64)) != 0 }

// lower returns row r's CPU and Disk bitsets (2*words words), or nil if both are empty.
func (t *keyRows) lower(r uint32) []uint64 {
	if !t.hasLower(r) {
		return nil
	}
	o := int(t.extAt[r]) * 2 * t.words
	return t.ext[o : o+2*t.words]
}

// hasGPU reports whether slot's GPU bit of row r is set.
func (t *keyRows) hasGPU(r, slot uint32) bool {
	bit := uint64(1) << (slot % 64)
	g, w, ok := t.inline(r)
	if !ok {
		return t.spilledBits(r)[slot/64]&bit != 0
	}
	return g == slot/64 && w&bit != 0
}

// has reports whether bit slot of row r is set in medium m.
func (t *keyRows) has(r uint32, m Medium, slot uint32) bool {
	if m == GPU {
		return t.hasGPU(r, slot)
	}
	bs := t.lower(r)
	if bs == nil {
		return false
	} else if m != CPU {
		bs = bs[t.words:]
	}
	return bs[slot/64]&(1<<(slot%64)) != 0
}

// setGPU sets slot's GPU bit of row r, spilling the row when slot is outside its inline group.
func (t *keyRows) setGPU(r, slot uint32) {
	bit, group := uint64(1)<<(slot%64), slot/64
	o := int(r)*rowStride + 1
	g, w, ok := t.inline(r)
	switch {
	case !ok:
		t.spilledBits(r)[group] |= bit
	case w == 0 || g == group:
		t.rows[o] = w | bit
		if t.gpuAt != nil {
			t.gpuAt[r] = uint16(group)
		}
	default:
		var d uint32
		if n := len(t.denseFree); n > 0 {
			d = t.denseFree[n-1]
			t.denseFree = t.denseFree[:n-1]
		} else {
			d = uint32(len(t.dense) / t.words)
			t.dense = append(t.dense, make([]uint64, t.words)...)
		}
		t.gpuAt[r], t.rows[o] = spilledGroup, uint64(d)
		bs := t.spilledBits(r)
		bs[g], bs[group] = w, bit
	}
}

// unsetGPU clears slot's GPU bit of row r; a spilled row left with holders in one group or none
// moves back inline.
func (t *keyRows) unsetGPU(r, slot uint32) {
	bit := uint64(1) << (slot % 64)
	o := int(r)*rowStride + 1
	g, _, ok := t.inline(r)
	if ok {
		if g == slot/64 {
			t.rows[o] &^= bit
		}
		return
	}
	d := uint32(t.rows[o])
	bs := t.spilledBits(r)
	bs[slot/64] &^= bit
	last, groups := 0, 0
	for x, w := range bs {
		if w != 0 {
			last, groups = x, groups+1
		}
	}
	if groups > 1 {
		return
	}
	t.rows[o], t.gpuAt[r] = bs[last], uint16(last)
	clear(bs)
	t.denseFree = append(t.denseFree, d)
}

// set sets bit slot of row r in medium m.
func (t *keyRows) set(r uint32, m Medium, slot uint32) {
	if m == GPU {
		t.setGPU(r, slot)
		return
	}
	bs := t.lower(r)
	if bs == nil {
		var e uint32
		if n := len(t.extFree); n > 0 {
			e = t.extFree[n-1]
			t.extFree = t.extFree[:n-1]
		} else {
			e = uint32(len(t.ext) / (2 * t.words))
			t.ext = append(t.ext, make([]uint64, 2*t.words)...)
		}
		if t.extAt == nil {
			t.extAt = make(map[uint32]uint32)
		}
		t.extAt[r] = e
		t.hasExt[r/64] |= 1 << (r % 64)
		bs = t.lower(r)
	}
	if m != CPU {
		bs = bs[t.words:]
	}
	bs[slot/64] |= 1 << (slot % 64)
}

// unset clears bit slot of row r in medium m, freeing what became empty: the lower-tier part,
// and the row with its key.
func (t *keyRows) unset(r uint32, m Medium, slot uint32) {
	if m == GPU {
		t.unsetGPU(r, slot)
	} else if bs := t.lower(r); bs != nil {
		if m != CPU {
			bs[t.words+int(slot/64)] &^= 1 << (slot % 64)
		} else {
			bs[slot/64] &^= 1 << (slot % 64)
		}
		if allZero(bs) {
			t.extFree = append(t.extFree, t.extAt[r])
			delete(t.extAt, r)
			t.hasExt[r/64] &^= 1 << (r % 64)
		}
	}
	if !t.hasLower(r) && t.gpuEmpty(r) {
		if t.child[r] != noRow {
			t.dead++
			return
		}
		t.release(r)
	}
}

// release frees row r, which has no bits and no children, unlinks it from its parent and frees
// the parent too if that was dead and r its last child.
func (t *keyRows) release(r uint32) {
	for {
		t.index.delete(t.key(r), r)
		t.free = append(t.free, r)
		p := t.parent[r]
		if p >= unknownRow {
			return
		}
		t.unlink(r)
		if t.child[p] != noRow || t.hasLower(p) || !t.gpuEmpty(p) {
			return
		}
		t.dead-- // p was dead: its last child is gone
		r = p
	}
}

// link makes r a child of p.
func (t *keyRows) link(r, p uint32) {
	t.parent[r], t.prev[r], t.next[r] = p, noRow, t.child[p]
	if c := t.child[p]; c != noRow {
		t.prev[c] = r
	}
	t.child[p] = r
}

// unlink removes r from its parent's children.
func (t *keyRows) unlink(r uint32) {
	p, n, v := t.parent[r], t.next[r], t.prev[r]
	if v != noRow {
		t.next[v] = n
	} else {
		t.child[p] = n
	}
	if n != noRow {
		t.prev[n] = v
	}
	t.parent[r] = unknownRow
}

// hasChildWith reports whether a child row of r has slot's GPU bit set.
func (t *keyRows) hasChildWith(r, slot uint32) bool {
	for c := t.child[r]; c != noRow; c = t.next[c] {
		if t.hasGPU(c, slot) {
			return true
		}
	}
	return false
}

func allZero(ws []uint64) bool {
	for _, w := range ws {
		if w != 0 {
			return false
		}
	}
	return true
}

// findOrAdd returns the row of key and whether it is new, creating one without bits if
// needed; the caller must set a bit in the row (new or dead) before releasing ix.mu. parent is the row of
// the key it is chained after (rootRow for a first block, unknownRow if that key has no row); a
// row whose parent was unknown learns it here.
func (t *keyRows) findOrAdd(key uint64, parent uint32) (uint32, bool) {
	at, r, ok := t.index.slot(key, t.rows)
	if ok {
		if t.dead > 0 && !t.hasLower(r) && t.gpuEmpty(r) {
			t.dead-- // a dead row: the caller sets a bit
		}
		if t.parent[r] == unknownRow && parent < unknownRow && parent != r {
			t.link(r, parent)
		}
		return r, false
	}
	if n := len(t.free); n > 0 {
		r = t.free[n-1]
		t.free = t.free[:n-1]
	} else {
		r = uint32(len(t.rows) / rowStride)
		t.rows = append(t.rows, 0, 0)
		if t.gpuAt != nil {
			t.gpuAt = append(t.gpuAt, 0)
		}
		if int(r/64) == len(t.hasExt) {
			t.hasExt = append(t.hasExt, 0)
		}
		t.parent = append(t.parent, unknownRow)
		t.child = append(t.child, noRow)
		t.next = append(t.next, noRow)
		t.prev = append(t.prev, noRow)
	}
	t.rows[int(r)*rowStride] = key
	t.index.put(at, key, r)
	t.child[r], t.next[r], t.prev[r], t.parent[r] = noRow, noRow, noRow, parent
	if parent < unknownRow {
		t.link(r, parent)
	}
	return r, true
}

// grow widens every bitset to words words (one per 64 worker slots). Inline rows keep their
// group; the first growth past one word gives every row a gpuAt entry (group 0).
func (t *keyRows) grow(words int) {
	if words <= t.words {
		return
	}
	if t.gpuAt == nil {
		t.gpuAt = make([]uint16, len(t.rows)/rowStride, cap(t.rows)/rowStride)
	}
	// ext holds CPU and Disk bitsets alternately, so it widens bitset by bitset too.
	t.dense, t.ext = widen(t.dense, t.words, words), widen(t.ext, t.words, words)
	t.words = words
}

// widen copies bitsets of from words each into bitsets of to words each.
func widen(bs []uint64, from, to int) []uint64 {
	n := len(bs) / from
	out := make([]uint64, n*to)
	for i := range n {
		copy(out[i*to:], bs[i*from:(i+1)*from])
	}
	return out
}

// len returns the number of live rows (distinct router keys held).
func (t *keyRows) len() int { return t.index.n - t.dead }
