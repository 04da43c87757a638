// Package kvindex maps router block keys to the workers that hold them.
//
// # Keys
//
// A router key is condisagg's own chained 64-bit block hash (vllm-kv-events.md §4.1, the same
// scheme as Dynamo's KV router): the local hash of a block is XXH3-64 of its tokens as
// little-endian uint32s seeded with LoRASeed, and each key is XXH3-64 of the previous key and
// the local hash (both little-endian uint64) seeded with Seed. Keys and AppendKeys compute them
// for full blocks; a partial tail block has no key.
//
// # Index
//
// An Index is built from engine events (Store, Remove, ClearWorker) per WorkerID, one per
// engine stream, and per Medium (GPU, CPU, Disk). Each worker gets a dense slot number. For each
// worker and medium an open-addressing table (internal/openaddr) maps engine hash (EH) ->
// {key row, refcount} (12 bytes a slot); a shared table maps each router key to a row holding the key and its GPU
// holders: one inline word while they all lie in one group of 64 slots, a dense bitset over
// every slot once a second group holds the key (a row costs 18 bytes, not 8 per 64 slots, at
// large fleets); CPU and Disk bitsets are kept apart for the keys that have them.
// Each row also links to the row of its parent key and to its children (rows.go), so a removal
// can tell whether the worker still holds a child of the key it drops.
//
// Overlap searches instead of scanning where it can (overlap_search.go): a worker is closed
// while every GPU key it holds has its parent key on GPU too; for closed workers without
// lower-tier entries, the holders of key i only shrink as i grows, so Overlap bisects the
// request on worker sets, about log2(n) probes per distinct divergence point. The other workers
// are scanned key by key, one table probe and a few word operations per key. A worker becomes
// unclosed when it drops a key while holding a child of it, and closed again by a clear.
// Invariants, true after every method returns:
//
//   - A worker's bit for (key, medium) is set iff at least one of its EHs in that medium has a
//     non-zero refcount and that router key. Several EHs may back one key; the bit goes with
//     the last of them.
//   - Every EH entry has refcount >= 1: each Store of an EH adds one, each Remove takes one,
//     and the entry is deleted at zero. The first store of an EH decides its router key.
//   - Excluded entries (non-plain blocks, §4.2 step 5) are refcounted like others but back no
//     key, so a store whose parent is excluded is skipped (SkipExcludedChain).
//   - A skipped Store changes nothing except registering the worker.
//   - Media are independent: a Remove in one medium never touches another. A store in a lower
//     tier resolves its parent in the same medium, else on GPU; a placeholder store without
//     tokens (OffloadingConnector default) takes the router key of the same EH on GPU.
//   - ClearWorker and RemoveWorker touch only that worker.
//   - A fenced worker (Fence, fence.go) applies no Store until its next ClearWorker, which
//     lifts the fence; ClearFenced and Unfence act only on the fence they name.
//   - A key row is live iff some bit of it is set; a row without bits stays (dead, not counted
//     by NumKeys) only while child rows link to it. A worker slot's bits exist only while the
//     worker is known (RemoveWorker clears them before the slot is reused).
//   - A worker's bit in Index.fast is set iff it is closed and holds no CPU or Disk entry; a
//     closed worker holds the parent key of every GPU key it holds.
//
// # Capacity
//
// Config.MaxBlocksPerWorker (default DefaultMaxBlocksPerWorker) caps the entries one worker
// holds over all media. A Store that could exceed the cap (current entries + len(Hashes) >
// cap) is refused whole with SkipCapacity; the worker keeps what it has, and its descendants
// are skipped as SkipParentNotFound until removes make room. The index as a whole holds at most
// 2^29 distinct keys, enforced the same way. Scratch buffers are bounded by the largest event
// applied. Separately, the sanity check of §4.3 (SetCapacity): a worker holding more GPU
// entries than its num_gpu_blocks is cleared, reported in StoreResult.CapacityCleared and
// counted in WorkerStats.CapacityClears.
//
// # Concurrency
//
// Every method is safe for concurrent use. One sync.RWMutex (Index.mu) guards all state.
// Store, Remove, ClearWorker, RemoveWorker, SetCapacity and the fence methods take it for writing, one event at a
// time; Update holds it for a whole batch of events (Tx). Overlap, Stats, Workers and NumKeys
// take it for reading, so lookups run in parallel with each other and wait only for the event
// (or batch) being applied. An Overlaps value holds the scratch of one lookup and belongs to
// one caller at a time. The Config is fixed at New.
//
// # Imports
//
// kvindex is a pure, I/O-free core: of the project it imports only the internal/openaddr leaf,
// and no net, os, log/slog, prometheus or goczmq package (enforced by TestImports). Metrics and logging belong to the
// callers (kvevents counts StoreResult.Skip by its String label).
package kvindex
