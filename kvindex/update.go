package kvindex

// Tx applies events with the index's write lock already held; get one from Update. Its methods
// behave exactly as the Index methods of the same name.
type Tx struct {
	ix *Index
}

// Update calls f with a Tx under one acquisition of the write lock, so that a whole event batch
// pays for locking once instead of once per event. Lookups wait until f returns, so f should
// apply one batch and nothing slower. The Tx is valid only during f; f must not call methods
// of the Index itself (they would deadlock).
func (ix *Index) Update(f func(tx Tx)) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	f(Tx{ix: ix})
}

// Store is Index.Store.
func (tx Tx) Store(w WorkerID, s *Store) StoreResult { return tx.ix.store(w, s) }

// Remove is Index.Remove.
func (tx Tx) Remove(w WorkerID, m Medium, hashes []uint64) (removed, notFound int) {
	return tx.ix.remove(w, m, hashes)
}

// ClearWorker is Index.ClearWorker.
func (tx Tx) ClearWorker(w WorkerID) { tx.ix.clearWorker(w) }
