package kvindex

// Store is one BlockStored event, already decoded and normalised by the caller.
type Store struct {
	Medium    Medium
	Parent    uint64 // engine hash of the parent block, valid when HasParent
	HasParent bool
	Hashes    []uint64 // engine hashes (EH) of the stored blocks
	// Tokens are the stored blocks' tokens. With Bigram (the event carried EAGLE pairs), Tokens
	// holds the n+1 tokens of n pairs (pair j = (Tokens[j], Tokens[j+1])): block i covers pairs
	// [i·B, (i+1)·B), and its key hashes Tokens[i·B : (i+1)·B+1] (KeysBigram).
	Tokens    []uint32
	Bigram    bool
	BlockSize int
	LoRA      []byte // lora_name, nil for the base model
	// Salt is the store's cache_salt (block 0's extra keys for vLLM, its own event field for
	// SGLang and Dynamo's TRT-LLM publisher); it seeds block 0 when the store starts a sequence
	// (no parent), and is ignored otherwise: a continuation's key chains from its parent's,
	// which the salt already seeded.
	Salt []byte
	// PlainBlocks: blocks [PlainBlocks, len(Hashes)) are non-plain (multimodal, salt,
	// embeddings) and recorded as an excluded chain (§4.2 step 5).
	PlainBlocks int
}

// SkipReason says why a Store was not applied. Its String is the snake_case metric label.
type SkipReason uint8

const (
	SkipNone              SkipReason = iota // applied
	SkipParentNotFound                      // parent EH unknown in the medium and in GPU
	SkipExcludedChain                       // parent EH is an excluded (non-plain) entry
	SkipBlockSizeMismatch                   // tokens present and BlockSize != Config.BlockSize
	SkipTokenMismatch                       // more tokens than len(Hashes)*BlockSize
	SkipDuplicateHash                       // Hashes repeats a hash or contains the parent
	SkipUnresolved                          // placeholder non-GPU store with an EH unknown on GPU
	SkipCapacity                            // the worker could exceed MaxBlocksPerWorker (or the index 2^29 keys, or 4,194,240 workers)
	SkipFenced                              // the worker is fenced: its prefix cache was reset and the engine's clear has not arrived (fence.go)
	SkipKeySchemeMismatch                   // tokens are EAGLE pairs and the index's keys plain, or the other way round
)

// String returns the metric label of r.
func (r SkipReason) String() string {
	switch r {
	case SkipNone:
		return "none"
	case SkipParentNotFound:
		return "parent_not_found"
	case SkipExcludedChain:
		return "excluded_chain"
	case SkipBlockSizeMismatch:
		return "block_size_mismatch"
	case SkipTokenMismatch:
		return "token_mismatch"
	case SkipDuplicateHash:
		return "duplicate_hash"
	case SkipUnresolved:
		return "unresolved"
	case SkipCapacity:
		return "capacity"
	case SkipFenced:
		return "fenced"
	case SkipKeySchemeMismatch:
		return "key_scheme_mismatch"
	}
	return "unknown"
}

// StoreResult is the outcome of one Store.
type StoreResult struct {
	Stored      int        // plain blocks applied (new entries and refcount increments)
	ShortTokens bool       // fewer tokens than blocks: only the covered leading blocks were indexed
	Skip        SkipReason // SkipNone unless the whole event was skipped
	// CapacityCleared: after applying, the worker held more GPU entries than its
	// num_gpu_blocks (SetCapacity), so it was cleared (§4.3 sanity check).
	CapacityCleared bool
}

// Store applies one BlockStored event of worker w, registering w if needed (vllm-kv-events.md
// §4.2, §3.4, §3.6). A skipped event changes nothing. s is only read, never retained. A Medium
// outside GPU..Disk is treated as Disk.
func (ix *Index) Store(w WorkerID, s *Store) StoreResult {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return ix.store(w, s)
}

// store is Store with ix.mu write-locked.
func (ix *Index) store(w WorkerID, s *Store) StoreResult {
	wk := ix.add(w)
	if wk == nil {
		return StoreResult{Skip: SkipCapacity} // maxSlots workers already known
	}
	if s == nil || len(s.Hashes) == 0 {
		return StoreResult{}
	}
	if wk.fence != 0 {
		return StoreResult{Skip: SkipFenced}
	}
	m := s.Medium
	if m >= NumMedia {
		m = Disk
	}
	if ix.scratch.hasDuplicate(s.Hashes, s.Parent, s.HasParent) {
		return StoreResult{Skip: SkipDuplicateHash}
	}
	var res StoreResult
	if m != GPU && len(s.Tokens) == 0 {
		res = ix.storePlaceholder(wk, m, s.Hashes)
	} else {
		res = ix.storeTokens(wk, m, s)
	}
	if res.Skip == SkipNone && m == GPU {
		res.CapacityCleared = ix.checkCapacity(wk)
	}
	ix.refreshFast(wk)
	return res
}

// storeTokens applies a store that carries its tokens.
func (ix *Index) storeTokens(wk *worker, m Medium, s *Store) StoreResult {
	B := ix.cfg.BlockSize
	if len(s.Tokens) > 0 && s.BlockSize != B {
		return StoreResult{Skip: SkipBlockSizeMismatch}
	}
	// units are the token positions the blocks cover: tokens, or pairs (one fewer).
	units, span := len(s.Tokens), B
	if len(s.Tokens) > 0 && s.Bigram != (ix.cfg.Keys == KeysBigram) {
		return StoreResult{Skip: SkipKeySchemeMismatch}
	} else if s.Bigram {
		units, span = max(len(s.Tokens)-1, 0), B+1
	}
	var pk uint64
	prow := uint32(rootRow) // the row of pk
	if s.HasParent {
		tbl := &wk.eh[m]
		at := tbl.find(s.Parent)
		if at < 0 && m != GPU {
			tbl = &wk.eh[GPU]
			at = tbl.find(s.Parent)
		}
		if at < 0 {
			return StoreResult{Skip: SkipParentNotFound}
		}
		ref := tbl.ref(at)
		if ref == excludedRef {
			return StoreResult{Skip: SkipExcludedChain}
		}
		pk, prow = ix.keys.key(ref), ref
	}
	n := len(s.Hashes)
	var res StoreResult
	covered := n
	if units > n*B {
		return StoreResult{Skip: SkipTokenMismatch}
	} else if units < n*B {
		covered = units / B
		res.ShortTokens = true
	}
	if wk.entries+n > ix.cfg.MaxBlocksPerWorker || ix.keys.index.n+n > maxRefs {
		return StoreResult{Skip: SkipCapacity}
	}
	seed := LoRASeed(s.LoRA)
	plain := min(max(s.PlainBlocks, 0), covered)
	if !s.HasParent && ix.allPresent(&wk.eh[m], s.Hashes[:covered]) {
		// A parentless store of blocks this worker already holds announces cache hits again
		// (vLLM's kv_cache_report_mode "full"), not new copies: counting it would keep the
		// entries alive past the removes the engine will send (vllm-kv-events.md §3.6).
		return res
	}
	ix.touchEH(&wk.eh[m], s.Hashes[:plain]) // its misses overlap with hashing
	keys := ix.keyBuf[:0]
	for j := range plain {
		sd := seed
		if j == 0 && !s.HasParent && len(s.Salt) > 0 {
			sd = SaltedSeed(s.LoRA, s.Salt)
		}
		pk = chainKey(pk, localHash(s.Tokens[j*B:j*B+span], sd))
		keys = append(keys, pk)
	}
	ix.keyBuf = keys
	ix.touchKeys(keys)
	tbl := &wk.eh[m]
	for j, k := range keys {
		prow = ix.addKeyEntry(wk, tbl, m, s.Hashes[j], k, prow)
	}
	res.Stored = plain
	if plain < s.PlainBlocks {
		return res // short tokens: blocks past the covered ones are not recorded
	}
	for _, eh := range s.Hashes[plain:] {
		ix.addEntry(wk, m, eh, excludedRef)
	}
	return res
}

// allPresent reports whether every hash is already an entry of t (and there is at least one).
func (ix *Index) allPresent(t *ehTable, hashes []uint64) bool {
	if len(hashes) == 0 || t.empty() {
		return false
	}
	for _, eh := range hashes {
		if t.find(eh) < 0 {
			return false
		}
	}
	return true
}

// touchEH and touchKeys load the table slots and rows that storing keys under hashes will use,
// so that their cache misses overlap instead of following one another (a software prefetch).
func (ix *Index) touchEH(t *ehTable, hashes []uint64) {
	if t.empty() {
		return
	}
	var acc uint64
	for _, eh := range hashes {
		acc += t.touch(eh)
	}
	ix.sink += acc
}

func (ix *Index) touchKeys(keys []uint64) {
	var acc uint64
	if t := &ix.keys.index; len(t.slots) > 0 {
		for _, k := range keys {
			acc += t.slots[t.home(keyHash(k))]
		}
	}
	rows, free := ix.keys.rows, ix.keys.free
	for j := range min(len(keys), len(free)) {
		acc += rows[int(free[len(free)-1-j])*rowStride]
	}
	ix.sink += acc
}

// storePlaceholder applies a non-GPU store without tokens (the OffloadingConnector default):
// each EH takes the router key of the same EH on GPU, all or nothing.
func (ix *Index) storePlaceholder(wk *worker, m Medium, hashes []uint64) StoreResult {
	gpu := &wk.eh[GPU]
	for _, eh := range hashes {
		if gpu.find(eh) < 0 {
			return StoreResult{Skip: SkipUnresolved}
		}
	}
	if wk.entries+len(hashes) > ix.cfg.MaxBlocksPerWorker {
		return StoreResult{Skip: SkipCapacity}
	}
	var res StoreResult
	for _, eh := range hashes {
		ref := gpu.ref(gpu.find(eh))
		ix.addEntry(wk, m, eh, ref)
		if ref != excludedRef {
			res.Stored++
		}
	}
	return res
}

// addKeyEntry records one store of eh backing router key k, chained after the key of row
// parent, in medium m of wk, whose table for m is tbl. It returns the row of k, or unknownRow
// when eh was already stored under another key and k has no row.
func (ix *Index) addKeyEntry(wk *worker, tbl *ehTable, m Medium, eh, k uint64, parent uint32) uint32 {
	at, ok := tbl.slot(eh)
	if ok {
		tbl.addRef(at)
		if r := tbl.ref(at); r != excludedRef && ix.keys.key(r) == k {
			return r
		}
		if r, ok := ix.keys.find(k); ok {
			return r
		}
		return unknownRow
	}
	ref, isNew := ix.keys.findOrAdd(k, parent)
	tbl.put(at, eh, ref)
	if isNew { // no bit to check, no other EH backing it
		wk.entries++
		ix.keys.set(ref, m, wk.slot)
		ix.noteSet(wk, m, ref)
		return ref
	}
	ix.addBacking(wk, m, ref)
	return ref
}

// noteSet keeps wk's closed state after its bit in row r was set in medium m: a GPU key whose
// parent key wk does not hold on GPU opens wk.
func (ix *Index) noteSet(wk *worker, m Medium, r uint32) {
	if m != GPU || wk.unclosed {
		return
	}
	switch p := ix.keys.parent[r]; {
	case p == rootRow:
	case p >= unknownRow || !ix.keys.has(p, GPU, wk.slot):
		wk.unclosed = true
	}
}

// addEntry records one store of eh with row ref (or excludedRef) in medium m of wk. An EH that
// is already present only gains a reference: its first store decided its key.
func (ix *Index) addEntry(wk *worker, m Medium, eh uint64, ref uint32) {
	tbl := &wk.eh[m]
	at, ok := tbl.slot(eh)
	if ok {
		tbl.addRef(at)
		return
	}
	tbl.put(at, eh, ref)
	ix.addBacking(wk, m, ref)
}

// addBacking counts a new entry of wk in medium m and records it as backing row ref (unless
// excluded).
func (ix *Index) addBacking(wk *worker, m Medium, ref uint32) {
	wk.entries++
	if ref == excludedRef {
		return
	}
	if !ix.keys.has(ref, m, wk.slot) {
		ix.keys.set(ref, m, wk.slot)
		ix.noteSet(wk, m, ref)
		return
	}
	if wk.extra[m] == nil {
		wk.extra[m] = make(map[uint32]uint32)
	}
	wk.extra[m][ref]++
}

// Remove applies one BlockRemoved event of worker w in medium m: each known EH loses one
// reference, and at zero its entry goes, and with it w's presence on the key unless another EH
// of w still backs it. A remove never touches another medium. Unknown EHs (and unknown workers)
// count as notFound. A Medium outside GPU..Disk is treated as Disk.
func (ix *Index) Remove(w WorkerID, m Medium, hashes []uint64) (removed, notFound int) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return ix.remove(w, m, hashes)
}

// remove is Remove with ix.mu write-locked.
func (ix *Index) remove(w WorkerID, m Medium, hashes []uint64) (removed, notFound int) {
	if m >= NumMedia {
		m = Disk
	}
	wk := ix.lookup(w)
	if wk == nil {
		return 0, len(hashes)
	}
	tbl := &wk.eh[m]
	for _, eh := range hashes {
		at := tbl.find(eh)
		if at < 0 {
			notFound++
			continue
		}
		removed++
		if !tbl.dropRef(at) {
			continue
		}
		ref := tbl.ref(at)
		tbl.delete(at)
		wk.entries--
		if ref != excludedRef {
			ix.dropBacking(wk, m, ref)
		}
	}
	ix.refreshFast(wk)
	return removed, notFound
}

// dropBacking withdraws one EH backing row ref in medium m of wk.
func (ix *Index) dropBacking(wk *worker, m Medium, ref uint32) {
	if x := wk.extra[m]; x != nil {
		if c, ok := x[ref]; ok {
			if c > 1 {
				x[ref] = c - 1
			} else {
				delete(x, ref)
			}
			return
		}
	}
	if m == GPU && !wk.unclosed && ix.keys.hasChildWith(ref, wk.slot) {
		wk.unclosed = true // wk still holds a child of the key it drops
	}
	ix.keys.unset(ref, m, wk.slot)
}
