package kvindex

// Position is how far a worker's entries follow its engine's event stream: the seq of the last
// batch whose events the index holds, and the XXH3-64 digest of that batch's payload. The
// event applier records it in the same write lock as the batch (Tx.SetPosition), so a
// snapshot (Export) pairs every worker's entries with the exact batch they end at, and a
// replica that imports the snapshot resumes the stream right after it: asking the engine to
// replay from Seq, checking the first reply against Digest (a restarted engine answers with
// another batch), then applying Seq+1 onwards, neither losing nor repeating a batch.
//
// The index only stores it: a ClearWorker (the stream's own clears, an AllBlocksCleared inside a
// batch) resets it, because after a stream clear the entries no longer follow from the batches
// before; the batch's applier sets it again at the end of the batch. A fenced clear
// (ClearFenced) keeps it: the stream goes on, and the fence refuses the stale stores.
type Position struct {
	Seq    uint64
	Digest uint64
	Valid  bool
}

// SetPosition is Index.SetPosition inside a batch.
func (tx Tx) SetPosition(w WorkerID, p Position) { tx.ix.setPosition(w, p) }

// SetPosition records w's stream position (registering w if needed, not past maxSlots workers).
func (ix *Index) SetPosition(w WorkerID, p Position) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.setPosition(w, p)
}

func (ix *Index) setPosition(w WorkerID, p Position) {
	if wk := ix.add(w); wk != nil {
		wk.pos = p
	}
}

// Position returns w's stream position; Valid is false when w is unknown, was cleared since
// its last batch, or never had one recorded.
func (ix *Index) Position(w WorkerID) Position {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if wk := ix.lookup(w); wk != nil {
		return wk.pos
	}
	return Position{}
}
