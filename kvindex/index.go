package kvindex

import (
	"slices"
	"sync"
)

// WorkerID names one indexed engine stream (kvevents uses one per (worker, dp_rank)).
type WorkerID string

// Index maps router block keys to the workers that hold them, per medium. Build it with New.
// All methods are safe for concurrent use.
type Index struct {
	cfg Config // validated, with defaults; never modified

	mu      sync.RWMutex        // guards every field below; lookups read-lock it, events write-lock it
	ids     map[WorkerID]uint32 // worker -> slot
	slots   []*worker           // by slot; nil marks a free slot
	names   []WorkerID          // by slot: slots[s].id, contiguous for building lookup results
	free    []uint32            // free slots, reused before slots grows
	live    []uint64            // bitset of occupied slots, keys.words words
	fast    []uint64            // bitset of the live slots whose overlap is found by search (overlap_search.go)
	keys    keyRows             // router key -> presence row
	scratch hashSet             // Store's duplicate-hash check
	keyBuf  []uint64            // Store's router keys of one event
	sink    uint64              // keeps Store's prefetching loads alive
	last    *worker             // the worker of the last event: batches come per worker
	fences  uint64              // Fence calls so far: the last FenceID handed out
}

// worker is the state of one WorkerID.
type worker struct {
	id   WorkerID
	slot uint32
	// eh maps, per medium, each engine hash to its entry.
	eh [NumMedia]ehTable
	// extra counts, per medium and row, the EHs backing that router key beyond the first (a key
	// may be backed by several EHs; its presence bit goes only when none is left). Usually nil.
	extra [NumMedia]map[uint32]uint32
	// unclosed: the worker may hold a GPU key without its parent key (it dropped a key while
	// holding a child of it, or stored after an EH held under another key). Until its next
	// clear, lookups scan it key by key instead of searching (overlap_search.go).
	unclosed     bool
	numGPUBlocks int // §4.3 sanity limit, 0 = unknown
	entries      int // entries over all media, for MaxBlocksPerWorker
	clears       int
	capClears    int
	fence        FenceID  // non-zero: stores are refused until the next ClearWorker (fence.go)
	pos          Position // the stream position the entries follow (position.go); reset by ClearWorker
}

// New returns an empty Index for cfg, or the field/value/rule errors of cfg.
func New(cfg Config) (*Index, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ix := &Index{
		cfg:  cfg.withDefaults(),
		ids:  make(map[WorkerID]uint32),
		keys: newKeyRows(),
	}
	ix.live = make([]uint64, ix.keys.words)
	ix.fast = make([]uint64, ix.keys.words)
	return ix, nil
}

// lookup returns the state of w, or nil. ix.mu must be held.
func (ix *Index) lookup(w WorkerID) *worker {
	s, ok := ix.ids[w]
	if !ok {
		return nil
	}
	return ix.slots[s]
}

// add returns the state of w, creating it in a free slot, or nil when w is new and every one of
// the maxSlots slots is taken. ix.mu must be write-locked.
func (ix *Index) add(w WorkerID) *worker {
	if ix.last != nil && ix.last.id == w {
		return ix.last
	}
	if wk := ix.lookup(w); wk != nil {
		ix.last = wk
		return wk
	}
	var s uint32
	if n := len(ix.free); n > 0 {
		s = ix.free[n-1]
		ix.free = ix.free[:n-1]
	} else {
		if len(ix.slots) >= maxSlots {
			return nil
		}
		s = uint32(len(ix.slots))
		ix.slots = append(ix.slots, nil)
		ix.names = append(ix.names, "")
		if words := (len(ix.slots) + 63) / 64; words > ix.keys.words {
			ix.keys.grow(words)
			ix.live = append(ix.live, make([]uint64, words-len(ix.live))...)
			ix.fast = append(ix.fast, make([]uint64, words-len(ix.fast))...)
		}
	}
	wk := &worker{id: w, slot: s}
	ix.slots[s], ix.names[s] = wk, w
	ix.ids[w] = s
	ix.live[s/64] |= 1 << (s % 64)
	ix.refreshFast(wk)
	ix.last = wk
	return wk
}

// refreshFast sets wk's bit in ix.fast iff wk is closed and holds nothing in the lower tiers:
// then its overlap is its GPU prefix, which Overlap finds by search.
func (ix *Index) refreshFast(wk *worker) {
	bit := uint64(1) << (wk.slot % 64)
	if !wk.unclosed && wk.eh[CPU].len() == 0 && wk.eh[Disk].len() == 0 {
		ix.fast[wk.slot/64] |= bit
	} else {
		ix.fast[wk.slot/64] &^= bit
	}
}

// ClearWorker drops every entry of w in all media (AllBlocksCleared, or history lost) and lifts
// its fence; w stays known. Unknown workers are ignored.
func (ix *Index) ClearWorker(w WorkerID) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.clearWorker(w)
}

// clearWorker is ClearWorker with ix.mu write-locked.
func (ix *Index) clearWorker(w WorkerID) {
	if wk := ix.lookup(w); wk != nil {
		ix.clear(wk)
		wk.fence = 0
		wk.pos = Position{}
	}
}

// clear drops every entry of wk and counts the clear. ix.mu must be write-locked.
func (ix *Index) clear(wk *worker) {
	for m := range NumMedia {
		wk.eh[m].each(func(ref uint32) {
			// A second EH backing the same key finds the bit already cleared.
			if ref != excludedRef && ix.keys.has(ref, Medium(m), wk.slot) {
				ix.keys.unset(ref, Medium(m), wk.slot)
			}
		})
		wk.eh[m].reset()
		wk.extra[m] = nil
	}
	wk.entries = 0
	wk.clears++
	wk.unclosed = false
	ix.refreshFast(wk)
}

// RemoveWorker drops w and all its entries (the worker left discovery). Unknown workers are
// ignored.
func (ix *Index) RemoveWorker(w WorkerID) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	wk := ix.lookup(w)
	if wk == nil {
		return
	}
	ix.clear(wk)
	ix.live[wk.slot/64] &^= 1 << (wk.slot % 64)
	ix.fast[wk.slot/64] &^= 1 << (wk.slot % 64)
	ix.slots[wk.slot], ix.names[wk.slot] = nil, ""
	ix.free = append(ix.free, wk.slot)
	delete(ix.ids, w)
	if ix.last == wk {
		ix.last = nil
	}
}

// SetCapacity records w's num_gpu_blocks (vllm-kv-events.md §4.3 sanity check; <= 0 = unknown)
// and registers w if needed (not past maxSlots workers). Whenever w holds more GPU entries than
// numGPUBlocks the index of w is inconsistent: it is cleared and counted in
// WorkerStats.CapacityClears.
func (ix *Index) SetCapacity(w WorkerID, numGPUBlocks int) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	wk := ix.add(w)
	if wk == nil {
		return
	}
	wk.numGPUBlocks = max(numGPUBlocks, 0)
	ix.checkCapacity(wk)
}

// checkCapacity applies the sanity check of SetCapacity and reports whether it cleared wk.
func (ix *Index) checkCapacity(wk *worker) bool {
	if wk.numGPUBlocks == 0 || wk.eh[GPU].len() <= wk.numGPUBlocks {
		return false
	}
	ix.clear(wk)
	wk.capClears++
	return true
}

// WorkerStats describes one worker's share of the index.
type WorkerStats struct {
	Blocks         [NumMedia]int // entries per medium, excluded entries included
	Clears         int           // ClearWorker calls, fenced clears and capacity clears
	CapacityClears int           // clears by the num_gpu_blocks sanity check
	Fenced         bool          // stores are refused until the engine's clear (Fence)
}

// Stats returns w's statistics, or false if w is unknown.
func (ix *Index) Stats(w WorkerID) (WorkerStats, bool) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	wk := ix.lookup(w)
	if wk == nil {
		return WorkerStats{}, false
	}
	st := WorkerStats{Clears: wk.clears, CapacityClears: wk.capClears, Fenced: wk.fence != 0}
	for m := range NumMedia {
		st.Blocks[m] = wk.eh[m].len()
	}
	return st, true
}

// Workers returns the known workers, sorted.
func (ix *Index) Workers() []WorkerID {
	ix.mu.RLock()
	ws := make([]WorkerID, 0, len(ix.ids))
	for w := range ix.ids {
		ws = append(ws, w)
	}
	ix.mu.RUnlock()
	slices.Sort(ws)
	return ws
}

// NumKeys returns the number of distinct router keys held by any worker in any medium.
func (ix *Index) NumKeys() int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.keys.len()
}

// BlockSize is the block size the index keys blocks by (Config.BlockSize).
func (ix *Index) BlockSize() int { return ix.cfg.BlockSize }

// Keys returns the index's key scheme (Config.Keys).
func (ix *Index) Keys() KeyScheme { return ix.cfg.Keys }
