package kvindex

import "math/bits"

// Search for closed workers.
//
// Keys are chained: the key of block i fixes the keys of blocks 0..i-1. A worker is closed when
// every GPU key it holds has its parent key on GPU too (worker.unclosed is false). Then "holds
// key i" implies "holds keys 0..i", so along a request the set of closed workers holding key i
// only shrinks as i grows, and each worker's overlap is the last position it is in. Overlap finds
// these positions by bisection on sets: it probes the middle of an interval, splits the workers
// into those that hold the middle key and those that do not, and recurses on each half with its
// own set. A request whose holders diverge at d distinct points costs about d·log2(n) probes
// instead of one probe per block. Workers that are not closed, or that hold lower-tier entries
// (whose CPU and Disk runs need the block-by-block scan), are scanned (ix.fast is the set
// searched here). When some worker is scanned, the scan follows every worker, since its cost
// per key does not depend on how many it follows, until no scanned worker extends; the searched
// workers still extending there are searched from that key on.
//
// A worker becomes unclosed when it drops a key while holding a child of it (found through the
// row links of rows.go) or stores a chain after an EH held under another key; it is closed again
// by its next clear. vLLM evicts a request's blocks tail first, so this is rare.

// searchFrame is one interval of the bisection: the workers of set (words of Overlaps.sets) hold
// key lo and, when hi < len(keys), not key hi.
type searchFrame struct {
	lo, hi int32
	set    int32 // offset of the set in Overlaps.sets
}

// search appends to out.Workers the overlap of every worker of ix.fast that holds key 0; ix.mu
// is held.
func (ix *Index) search(keys []uint64, out *Overlaps) {
	W := ix.keys.words
	a := out.grabSet(W)
	if ix.probe(keys[0], ix.fast, out.sets[a:a+W]) {
		ix.searchFrom(keys, 0, a, out)
	}
	out.sets = out.sets[:0]
}

// searchFrom appends to out.Workers the overlap of the workers of the set at offset a of
// out.sets, which hold keys 0..lo.
func (ix *Index) searchFrom(keys []uint64, lo, a int, out *Overlaps) {
	W := ix.keys.words
	out.frames = append(out.frames[:0], searchFrame{lo: int32(lo), hi: int32(len(keys)), set: int32(a)})
	for len(out.frames) > 0 {
		f := out.frames[len(out.frames)-1]
		out.frames = out.frames[:len(out.frames)-1]
		if f.hi-f.lo == 1 {
			ix.settle(out, out.sets[f.set:int(f.set)+W], int(f.hi))
			continue
		}
		mid := (f.lo + f.hi) / 2
		in := out.grabSet(W) // sets only grow during one lookup
		A := out.sets[f.set : int(f.set)+W]
		anyIn := ix.probe(keys[mid], A, out.sets[in:in+W])
		anyOut := false
		for x := range W {
			A[x] &^= out.sets[in+x]
			anyOut = anyOut || A[x] != 0
		}
		if anyOut {
			out.frames = append(out.frames, searchFrame{lo: f.lo, hi: mid, set: f.set})
		}
		if anyIn {
			out.frames = append(out.frames, searchFrame{lo: mid, hi: f.hi, set: int32(in)})
		}
	}
}

// probe stores in dst the workers of set that hold key on GPU and reports whether there are any.
func (ix *Index) probe(key uint64, set, dst []uint64) bool {
	r, ok := ix.keys.find(key)
	if !ok {
		clear(dst)
		return false
	}
	if g, w, ok := ix.keys.inline(r); ok {
		// Most rows: holders in one 64-slot group (rows.go).
		clear(dst)
		dst[g] = set[g] & w
		return dst[g] != 0
	}
	gpu := ix.keys.spilledBits(r)
	var any uint64
	for x := range dst {
		dst[x] = set[x] & gpu[x]
		any |= dst[x]
	}
	return any != 0
}

// grabSet appends a W-word set to out.sets and returns its offset.
func (o *Overlaps) grabSet(W int) int {
	a := len(o.sets)
	if cap(o.sets)-a < W {
		o.sets = append(o.sets[:a:a], make([]uint64, W+a)...)[:a]
	}
	o.sets = o.sets[:a+W]
	return a
}

// settle appends to out.Workers an overlap of end GPU blocks, and nothing below, for the workers
// of set.
func (ix *Index) settle(out *Overlaps, set []uint64, end int) {
	for x, w := range set {
		for ; w != 0; w &= w - 1 {
			s := 64*x + bits.TrailingZeros64(w)
			w := out.next()
			w.Worker, w.GPU, w.CPU, w.Disk = ix.names[s], end, 0, 0
		}
	}
}

// next appends an element to o.Workers and returns it for the caller to fill. Appending a
// composite literal instead, Go builds it on the stack and copies it with 16-byte loads that
// stall on the 8-byte stores just made: that copy was 70 % of a lookup's time (bench-peers,
// 8k/w64/o50: 0.59 µs per lookup with it, 0.27 µs filled in place).
func (o *Overlaps) next() *WorkerOverlap {
	n := len(o.Workers)
	if n == cap(o.Workers) {
		o.Workers = append(o.Workers, WorkerOverlap{})
	} else {
		o.Workers = o.Workers[:n+1]
	}
	return &o.Workers[n]
}
