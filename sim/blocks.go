package sim

// blockPool is the paged KV cache: numBlocks physical blocks, each with a refcount, an optional
// prefix-cache hash and a place in the free queue (vLLM v1 BlockPool semantics).
//
//   - A block with refcount 0 is free and sits in the free queue, cached or not; allocation takes
//     the queue's head, so free cached blocks are evicted least recently freed first.
//   - A cached block with refcount > 0 is never evicted; a prefix hit on a free cached block
//     takes it out of the queue (touch).
//   - byHash maps a hash to one cached block holding it. A second physical copy of a hash (a
//     recomputed last block) is cached and evicted like any other but not found by lookups.
type blockPool struct {
	hash   []uint64
	ref    []int32
	cached []bool
	// prev and next link the free queue; index n is the sentinel (head = next[n], tail = prev[n]).
	prev, next []int32
	numFree    int
	byHash     map[uint64]int32
}

func newBlockPool(n int) *blockPool {
	p := &blockPool{
		hash:   make([]uint64, n),
		ref:    make([]int32, n),
		cached: make([]bool, n),
		prev:   make([]int32, n+1),
		next:   make([]int32, n+1),
		byHash: make(map[uint64]int32, n),
	}
	s := int32(n)
	p.prev[s], p.next[s] = s, s
	for b := range int32(n) {
		p.pushTail(b)
	}
	return p
}

func (p *blockPool) size() int { return len(p.ref) }

func (p *blockPool) pushTail(b int32) {
	s := int32(len(p.ref))
	t := p.prev[s]
	p.next[t], p.prev[b] = b, t
	p.next[b], p.prev[s] = s, b
	p.numFree++
}

func (p *blockPool) unlink(b int32) {
	pv, nx := p.prev[b], p.next[b]
	p.next[pv], p.prev[nx] = nx, pv
	p.numFree--
}

// lookup returns the cached block holding hash h.
func (p *blockPool) lookup(h uint64) (int32, bool) {
	b, ok := p.byHash[h]
	return b, ok
}

// touch takes a reference on a cached block found by lookup.
func (p *blockPool) touch(b int32) {
	if p.ref[b] == 0 {
		p.unlink(b)
	}
	p.ref[b]++
}

// alloc takes the free queue's head. When it was cached it is evicted first: evicted reports
// its hash. The caller checks numFree > 0.
func (p *blockPool) alloc() (b int32, evictedHash uint64, evicted bool) {
	s := int32(len(p.ref))
	b = p.next[s]
	p.unlink(b)
	p.ref[b] = 1
	if p.cached[b] {
		evictedHash, evicted = p.hash[b], true
		p.uncache(b)
	}
	return b, evictedHash, evicted
}

func (p *blockPool) uncache(b int32) {
	if cur, ok := p.byHash[p.hash[b]]; ok && cur == b {
		delete(p.byHash, p.hash[b])
	}
	p.cached[b], p.hash[b] = false, 0
}

// release drops one reference; at 0 the block joins the free queue's tail (it stays cached).
func (p *blockPool) release(b int32) {
	p.ref[b]--
	if p.ref[b] == 0 {
		p.pushTail(b)
	}
}

// cache records that block b holds the full block with hash h.
func (p *blockPool) cache(b int32, h uint64) {
	p.hash[b], p.cached[b] = h, true
	if _, ok := p.byHash[h]; !ok {
		p.byHash[h] = b
	}
}

// inUse reports whether any block has a reference.
func (p *blockPool) inUse() bool { return p.numFree != len(p.ref) }

// reset uncaches every block (all must be free).
func (p *blockPool) reset() {
	clear(p.byHash)
	clear(p.cached)
	clear(p.hash)
}
