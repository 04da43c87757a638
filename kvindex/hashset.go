package kvindex

// smallHashes is the list length up to which hasDuplicate compares pairs directly.
const smallHashes = 6

// hashSet is a reusable scratch set for Store's duplicate-hash guard (§3.6). Slots are valid
// only when their stamp equals the current generation, so it needs no clearing between uses.
type hashSet struct {
	keys  []uint64
	stamp []uint32
	gen   uint32
}

// hasDuplicate reports whether hashes repeats a value or (when hasParent) contains parent.
func (h *hashSet) hasDuplicate(hashes []uint64, parent uint64, hasParent bool) bool {
	if len(hashes) <= smallHashes {
		for i, a := range hashes {
			if hasParent && a == parent {
				return true
			}
			for _, b := range hashes[i+1:] {
				if a == b {
					return true
				}
			}
		}
		return false
	}
	size := 1
	for size < 2*len(hashes) {
		size <<= 1
	}
	if len(h.keys) < size {
		h.keys = make([]uint64, size)
		h.stamp = make([]uint32, size)
		h.gen = 0
	}
	h.gen++
	if h.gen == 0 { // wrapped: stale stamps could look current
		clear(h.stamp)
		h.gen = 1
	}
	mask, shift := uint64(size-1), uint8(64-log2(size))
	for _, a := range hashes {
		if hasParent && a == parent {
			return true
		}
		i := (a * fibMul) >> shift
		for h.stamp[i] == h.gen {
			if h.keys[i] == a {
				return true
			}
			i = (i + 1) & mask
		}
		h.keys[i], h.stamp[i] = a, h.gen
	}
	return false
}
