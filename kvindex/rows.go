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

// keyRows maps each router key that at least one worker holds to a row of presence bitsets, one
// bit per worker slot and medium.
//
// Row r occupies rows[r*stride : (r+1)*stride]: word 0 is the key, then the GPU bitset of
// `words` words. Lower tiers are rarer, so their bitsets live apart: when extOf[r] != 0, the
// CPU and then the Disk bitset of row r are ext[(extOf[r]-1)*2*words:][:2*words]. A row lives
// while any of its bits is set; then its key is deleted and the row goes on the free list (its
// lower-tier part as soon as that is empty). A row without bits whose key still has child rows
// stays (dead) until its last child goes, so the links stay valid; dead rows hold no key.
type keyRows struct {
	index   keyTable // router key -> row
	rows    []uint64
	extOf   []uint32 // by row: 1 + index of its lower-tier bitsets in ext, or 0
	ext     []uint64
	words   int // bitset words per medium
	stride  int // 1 + words
	free    []uint32
	extFree []uint32
	// By row: parent row (or rootRow, unknownRow), first child, next and previous sibling.
	parent, child, next, prev []uint32
	dead                      int // rows without bits kept for their children
}

func newKeyRows() keyRows {
	return keyRows{words: 1, stride: 2}
}

// find returns the row of key.
func (t *keyRows) find(key uint64) (uint32, bool) {
	return t.index.find(key, t.rows, t.stride)
}

// key returns the router key of row r.
func (t *keyRows) key(r uint32) uint64 { return t.rows[int(r)*t.stride] }

// gpu returns row r's GPU bitset.
func (t *keyRows) gpu(r uint32) []uint64 {
	o := int(r)*t.stride + 1
	return t.rows[o : o+t.words]
}

// lower returns row r's CPU and Disk bitsets (2*words words), or nil if both are empty.
func (t *keyRows) lower(r uint32) []uint64 {
	e := t.extOf[r]
	if e == 0 {
		return nil
	}
	o := int(e-1) * 2 * t.words
	return t.ext[o : o+2*t.words]
}

// gpuWord returns the index in rows of the GPU bitset word holding slot's bit for row r.
func (t *keyRows) gpuWord(r, slot uint32) int { return int(r)*t.stride + 1 + int(slot/64) }

// has reports whether bit slot of row r is set in medium m.
func (t *keyRows) has(r uint32, m Medium, slot uint32) bool {
	if m == GPU {
		return t.rows[t.gpuWord(r, slot)]&(1<<(slot%64)) != 0
	}
	bs := t.lower(r)
	if bs == nil {
		return false
	} else if m != CPU {
		bs = bs[t.words:]
	}
	return bs[slot/64]&(1<<(slot%64)) != 0
}

// set sets bit slot of row r in medium m.
func (t *keyRows) set(r uint32, m Medium, slot uint32) {
	if m == GPU {
		t.rows[t.gpuWord(r, slot)] |= 1 << (slot % 64)
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
		t.extOf[r] = e + 1
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
		t.rows[t.gpuWord(r, slot)] &^= 1 << (slot % 64)
	} else if bs := t.lower(r); bs != nil {
		if m != CPU {
			bs[t.words+int(slot/64)] &^= 1 << (slot % 64)
		} else {
			bs[slot/64] &^= 1 << (slot % 64)
		}
		if allZero(bs) {
			t.extFree = append(t.extFree, t.extOf[r]-1)
			t.extOf[r] = 0
		}
	}
	if t.extOf[r] == 0 && allZero(t.gpu(r)) {
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
		if t.child[p] != noRow || t.extOf[p] != 0 || !allZero(t.gpu(p)) {
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
		if t.rows[t.gpuWord(c, slot)]&(1<<(slot%64)) != 0 {
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
	at, r, ok := t.index.slot(key, t.rows, t.stride)
	if ok {
		if t.dead > 0 && t.extOf[r] == 0 && allZero(t.gpu(r)) {
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
		r = uint32(len(t.rows) / t.stride)
		t.rows = append(t.rows, make([]uint64, t.stride)...)
		t.extOf = append(t.extOf, 0)
		t.parent = append(t.parent, unknownRow)
		t.child = append(t.child, noRow)
		t.next = append(t.next, noRow)
		t.prev = append(t.prev, noRow)
	}
	t.rows[int(r)*t.stride] = key
	t.index.put(at, key, r)
	t.child[r], t.next[r], t.prev[r], t.parent[r] = noRow, noRow, noRow, parent
	if parent < unknownRow {
		t.link(r, parent)
	}
	return r, true
}

// grow widens every bitset to words words (one per 64 worker slots).
func (t *keyRows) grow(words int) {
	if words <= t.words {
		return
	}
	n := len(t.rows) / t.stride
	rows := make([]uint64, n*(1+words), max(n, 64)*(1+words))
	for r := range n {
		copy(rows[r*(1+words):], t.rows[r*t.stride:(r+1)*t.stride])
	}
	ne := len(t.ext) / (2 * t.words)
	ext := make([]uint64, ne*2*words)
	for e := range ne {
		copy(ext[e*2*words:], t.ext[e*2*t.words:e*2*t.words+t.words])           // CPU
		copy(ext[e*2*words+words:], t.ext[e*2*t.words+t.words:(e+1)*2*t.words]) // Disk
	}
	t.rows, t.ext, t.words, t.stride = rows, ext, words, 1+words
}

// len returns the number of live rows (distinct router keys held).
func (t *keyRows) len() int { return t.index.n - t.dead }
