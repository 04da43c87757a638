package kvindex

// maxRefs bounds the number of live key rows (and the per-worker entry cap), so that a row
// reference fits in 32 bits with room for the excluded marker.
const maxRefs = 1 << 30

// excludedRef is the row reference of an excluded entry (a non-plain block, §4.2 step 5): it is
// refcounted like any entry but backs no router key.
const excludedRef = ^uint32(0)

// keyRows maps each router key that at least one worker holds to a row of presence bitsets.
//
// Row r occupies rows[r*stride : (r+1)*stride]: word 0 is the key, then NumMedia bitsets of
// `words` words each, one bit per worker slot (GPU first, then CPU, then Disk). A row lives while
// any of its bits is set; then its key is deleted and the row goes on the free list.
type keyRows struct {
	index  keyTable // router key -> row
	rows   []uint64
	words  int // bitset words per medium
	stride int // 1 + NumMedia*words
	free   []uint32
}

func newKeyRows() keyRows {
	return keyRows{words: 1, stride: 1 + NumMedia}
}

// find returns the row of key.
func (t *keyRows) find(key uint64) (uint32, bool) {
	return t.index.find(key, t.rows, t.stride)
}

// key returns the router key of row r.
func (t *keyRows) key(r uint32) uint64 { return t.rows[int(r)*t.stride] }

// mask returns row r's bitset for medium m.
func (t *keyRows) mask(r uint32, m Medium) []uint64 {
	o := int(r)*t.stride + 1 + int(m)*t.words
	return t.rows[o : o+t.words]
}

// findOrAdd returns the row of key, creating an empty one if needed.
func (t *keyRows) findOrAdd(key uint64) uint32 {
	if r, ok := t.index.find(key, t.rows, t.stride); ok {
		return r
	}
	var r uint32
	if n := len(t.free); n > 0 {
		r = t.free[n-1]
		t.free = t.free[:n-1]
	} else {
		r = uint32(len(t.rows) / t.stride)
		t.rows = append(t.rows, make([]uint64, t.stride)...)
	}
	t.rows[int(r)*t.stride] = key
	t.index.insert(key, r)
	return r
}

// empty reports whether row r has no bit set in any medium.
func (t *keyRows) empty(r uint32) bool {
	o := int(r)*t.stride + 1
	for _, w := range t.rows[o : o+NumMedia*t.words] {
		if w != 0 {
			return false
		}
	}
	return true
}

// release deletes row r's key and frees the row; the row must be empty.
func (t *keyRows) release(r uint32) {
	t.index.delete(t.key(r), r)
	t.free = append(t.free, r)
}

// grow widens every bitset to words words (one per 64 worker slots).
func (t *keyRows) grow(words int) {
	if words <= t.words {
		return
	}
	stride := 1 + NumMedia*words
	n := len(t.rows) / t.stride
	rows := make([]uint64, n*stride, max(n, 64)*stride)
	for r := range n {
		old := t.rows[r*t.stride : (r+1)*t.stride]
		row := rows[r*stride : (r+1)*stride]
		row[0] = old[0]
		for m := range NumMedia {
			copy(row[1+m*words:], old[1+m*t.words:1+(m+1)*t.words])
		}
	}
	t.rows, t.words, t.stride = rows, words, stride
}

// len returns the number of live rows (distinct router keys held).
func (t *keyRows) len() int { return t.index.n }
