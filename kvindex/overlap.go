package kvindex

import "math/bits"

// lookupChunk is how many keys Overlap looks up ahead of the scan.
const lookupChunk = 16

// WorkerOverlap is one worker's cached prefix of a key sequence, in blocks: GPU leading keys on
// the device, then CPU and Disk keys continuing that prefix contiguously in the lower tiers
// (ext_host and ext_disk of conditional-disagg.md §1).
type WorkerOverlap struct {
	Worker         WorkerID
	GPU, CPU, Disk int
}

// Overlaps is the result of Overlap. Reuse one value across calls: its slices are kept, so the
// steady state allocates nothing. It must not be used by two calls at once.
type Overlaps struct {
	Workers []WorkerOverlap

	gpuOn, extOn []uint64 // workers still extending in the GPU phase / in the lower-tier phase
	gpuEnd       []int32  // per slot: first key not on GPU
	extEnd       []int32  // per slot: first key ending the lower-tier run
	disk         []int32  // per slot: Disk-only keys in the lower-tier run
	zero         []uint64 // an all-zero row for keys nobody holds
	row          []uint64 // the scan's current GPU bitset when its row is inline (rows.go)

	sets   []uint64      // worker sets of the search (overlap_search.go)
	frames []searchFrame // its pending intervals
}

// Overlap fills out.Workers with one element per worker that holds key 0 in any medium (in slot
// an unspecified order): GPU = the number of leading keys held on GPU; then, from the first
// key not on GPU, the run of keys held on CPU or Disk, split into CPU (held on CPU, possibly on
// Disk too) and Disk (held on Disk only). A key held only on GPU ends the run. Closed workers
// without lower-tier entries are found by search (overlap_search.go); the others by a scan, key
// by key, that stops as soon as none of them can extend. Safe for concurrent use with every
// other method.
func (ix *Index) Overlap(keys []uint64, out *Overlaps) {
	out.Workers = out.Workers[:0]
	if len(keys) == 0 {
		return
	}
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if _, ok := ix.keys.find(keys[0]); !ok {
		return // no worker holds key 0 in any medium
	}
	W := ix.keys.words
	ns := len(ix.slots)
	out.prepare(W, ns)
	g, e := out.gpuOn[:W], out.extOn
	inclW := out.gpuOn[W : 2*W]
	slow := false
	for x := range W {
		slow = slow || ix.live[x]&^ix.fast[x] != 0
	}
	if slow {
		// The scan's cost per key does not depend on how many workers it follows, so it
		// follows all of them while some scanned worker extends; the searched ones still
		// extending where it stops are searched from there.
		copy(g, ix.live)
		clear(e)
		if stop, stopped := ix.scan(keys, out, g, e, W); stopped {
			a := out.grabSet(W)
			rest := false
			for x := range W {
				out.sets[a+x] = g[x] & ix.fast[x]
				inclW[x] &^= out.sets[a+x] // the search writes their results
				rest = rest || out.sets[a+x] != 0
			}
			if rest {
				ix.searchFrom(keys, stop, a, out)
			}
			out.sets = out.sets[:0]
		}
	} else {
		ix.search(keys, out)
		return
	}
	for x, word := range inclW {
		for word != 0 {
			s := 64*x + bits.TrailingZeros64(word)
			word &= word - 1
			ge, ee, d := int(out.gpuEnd[s]), int(out.extEnd[s]), int(out.disk[s])
			w := out.next()
			w.Worker, w.GPU, w.CPU, w.Disk = ix.names[s], ge, ee-ge-d, d
		}
	}
}

// scan is the key-by-key overlap of the workers in g (the GPU-phase set; e, the lower-tier
// phase set, starts empty). It writes the included workers into out.gpuOn[W:2W]. It stops
// after the key where no worker outside ix.fast extends any more and reports that key (then
// the workers of ix.fast still in g hold keys 0..stop and are not settled).
func (ix *Index) scan(keys []uint64, out *Overlaps, g, e []uint64, W int) (stop int, stopped bool) {
	var refs [lookupChunk]uint32 // row+1 (0 = no worker holds the key)
	var exts [lookupChunk]bool   // the row has lower-tier holders
	for base := 0; base < len(keys); base += lookupChunk {
		chunk := keys[base:min(base+lookupChunk, len(keys))]
		// Look the whole chunk up first: the lookups are independent, so their cache misses
		// overlap instead of each waiting for the previous key's step.
		for j, k := range chunk {
			refs[j], exts[j] = 0, false
			if r, ok := ix.keys.find(k); ok {
				refs[j], exts[j] = r+1, ix.keys.hasLower(r)
			}
		}
		for j := range chunk {
			gpu, lower := out.zero[:W], out.zero
			if refs[j] != 0 {
				gpu = ix.keys.gpu(refs[j]-1, out.row)
				if exts[j] {
					lower = ix.keys.lower(refs[j] - 1)
				}
			}
			i := base + j
			if i == 0 {
				out.markIncluded(g, gpu, lower, W)
			}
			if !out.step(i, g, e, gpu, lower, ix.fast) {
				return i, true
			}
		}
	}
	out.finish(len(keys), g, e)
	return len(keys), false
}

// prepare sizes the scratch for W bitset words and ns worker slots.
func (o *Overlaps) prepare(W, ns int) {
	if len(o.gpuOn) < 2*W {
		o.gpuOn = make([]uint64, 2*W) // second half: the included set
		o.extOn = make([]uint64, W)
		o.zero = make([]uint64, 2*W)
		o.row = make([]uint64, W)
	}
	o.gpuOn, o.extOn, o.zero, o.row = o.gpuOn[:2*W], o.extOn[:W], o.zero[:2*W], o.row[:W]
	if len(o.gpuEnd) < ns {
		o.gpuEnd = make([]int32, ns)
		o.extEnd = make([]int32, ns)
		o.disk = make([]int32, ns)
	}
}

// markIncluded stores, in the second half of gpuOn, the scanned workers holding key 0 in any
// medium.
func (o *Overlaps) markIncluded(g, gpu, lower []uint64, W int) {
	incl := o.gpuOn[W : 2*W]
	for x := range W {
		incl[x] = g[x] & (gpu[x] | lower[x] | lower[W+x])
	}
}

// step advances every extending worker over key i, held on GPU by the workers of bitset gpu and
// on CPU and Disk by those of lower (CPU words, then Disk words), and reports whether any worker
// outside fast (the searched workers) is still extending.
func (o *Overlaps) step(i int, g, e, gpuBits, lower, fast []uint64) bool {
	more, W := uint64(0), len(g)
	for x := range W {
		gpu, cpu, dsk := gpuBits[x], lower[x], lower[W+x]
		ext := cpu | dsk
		gx, ex := g[x], e[x]
		leaveG := gx &^ gpu
		leaveE := ex &^ ext
		newE := leaveG&ext | ex&ext
		for b := leaveG; b != 0; b &= b - 1 {
			s := 64*x + bits.TrailingZeros64(b)
			o.gpuEnd[s], o.extEnd[s], o.disk[s] = int32(i), int32(i), 0
		}
		for b := leaveE; b != 0; b &= b - 1 {
			o.extEnd[64*x+bits.TrailingZeros64(b)] = int32(i)
		}
		for b := newE & dsk &^ cpu; b != 0; b &= b - 1 {
			o.disk[64*x+bits.TrailingZeros64(b)]++
		}
		g[x], e[x] = gx&gpu, newE
		more |= (gx&gpu | newE) &^ fast[x]
	}
	return more != 0
}

// finish closes the runs of workers still extending after the last key (end = len(keys)).
func (o *Overlaps) finish(end int, g, e []uint64) {
	for x := range g {
		for b := g[x]; b != 0; b &= b - 1 {
			s := 64*x + bits.TrailingZeros64(b)
			o.gpuEnd[s], o.extEnd[s], o.disk[s] = int32(end), int32(end), 0
		}
		for b := e[x]; b != 0; b &= b - 1 {
			o.extEnd[64*x+bits.TrailingZeros64(b)] = int32(end)
		}
	}
}
