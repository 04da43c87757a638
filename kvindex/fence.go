package kvindex

// A fence covers the window of an engine's prefix-cache reset that the router starts itself
// (Admin ResetPrefixCache). vLLM empties its hash table when POST /reset_prefix_cache answers,
// but publishes AllBlocksCleared only with its next engine step (docs/vllm-facts.md §b), and
// batches of earlier steps may still be on their way. So the router clears the worker at once
// and refuses its stores until the engine's own clear arrives: every batch before that clear
// is from before the reset, and re-applying its stores would credit blocks the engine no
// longer holds.
//
// The protocol, for one worker:
//
//	f := ix.Fence(w)       // before the reset request: from now on w's stores are refused
//	... POST /reset_prefix_cache ...
//	ix.ClearFenced(w, f)   // it succeeded: drop w's entries, keep refusing until the clear
//	ix.Unfence(w, f)       // or it failed: w keeps its entries and stores again
//
// Any ClearWorker (the engine's AllBlocksCleared, or the event stream's own clears after a
// restart or lost history) lifts the fence. The fence is raised before the reset is asked for,
// so the engine's clear cannot arrive before it; if the clear is applied before ClearFenced,
// ClearFenced does nothing, so the stores that followed the clear stay.
//
// One order is not covered: after an earlier reset made directly on the engine (not through
// the router), the engine's next batch is [AllBlocksCleared, that step's stores]; if the
// router has not applied that batch yet when its own reset fences the worker, that older
// clear lifts the new fence and its stores, which the router's reset removed from the engine,
// come back. A clear carries no reset identity, so the index cannot tell the two apart.

// FenceID identifies one Fence call; ClearFenced and Unfence act only on the fence they name.
type FenceID uint64

// Fence makes w refuse its stores (SkipFenced) until the next ClearWorker, and registers w if
// needed. Removes still apply. A later Fence replaces an earlier one. It returns 0, a fence that
// clears nothing, when w is new and the index already knows maxSlots workers.
func (ix *Index) Fence(w WorkerID) FenceID {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	wk := ix.add(w)
	if wk == nil {
		return 0
	}
	ix.fences++
	wk.fence = FenceID(ix.fences)
	return FenceID(ix.fences)
}

// ClearFenced drops w's entries if fence f still holds (no ClearWorker since), keeping the
// fence; it reports whether it cleared.
func (ix *Index) ClearFenced(w WorkerID, f FenceID) bool {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	wk := ix.lookup(w)
	if wk == nil || f == 0 || wk.fence != f {
		return false
	}
	ix.clear(wk)
	return true
}

// Unfence lifts fence f if it still holds; w's entries stay. It reports whether it lifted.
func (ix *Index) Unfence(w WorkerID, f FenceID) bool {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	wk := ix.lookup(w)
	if wk == nil || f == 0 || wk.fence != f {
		return false
	}
	wk.fence = 0
	return true
}

// Fenced reports whether w refuses its stores.
func (ix *Index) Fenced(w WorkerID) bool {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	wk := ix.lookup(w)
	return wk != nil && wk.fence != 0
}
