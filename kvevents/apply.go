package kvevents

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/condisagg/condisagg/kvindex"
	"github.com/zeebo/xxh3"
)

// ErrRankMismatch is returned by Applier.ApplyPayload for a batch whose non-nil
// data_parallel_rank differs from the stream's rank (vllm-kv-events.md §1.3). The batch is
// dropped whole; the stream's index is still valid.
var ErrRankMismatch = errors.New("kvevents: batch data_parallel_rank differs from the stream's rank")

// Applier applies the decoded batches of one stream (one engine: worker and dp_rank) to the
// prefix index, following vllm-kv-events.md §3 and §4.2–4.3. It reuses one Batch and one
// kvindex.Store, so a warm Applier allocates nothing per batch.
//
// An Applier belongs to one goroutine (the stream's subscriber); it is not safe for concurrent
// use. The Index it writes to is.
type Applier struct {
	ix     *kvindex.Index
	worker kvindex.WorkerID
	rank   int64
	lim    Limits

	batch Batch
	store kvindex.Store
	c     applyCounters

	// tx is the index transaction of the batch being applied, valid only inside applyEvents;
	// applyEvents is built once so that ix.Update costs no allocation per batch.
	tx          kvindex.Tx
	applyEvents func(kvindex.Tx)

	// pos is the stream position the batch being applied moves the index to (ApplyAt); it is
	// recorded in the same index transaction. Invalid for ApplyPayload.
	pos kvindex.Position

	// storedInBatch counts the BlockStored events of the last batch that the index accepted.
	storedInBatch int

	// mismatchBlockSize is the block_size of the last store refused because it differs from
	// the index's; 0 when none was. The shell reports it (BlockSizeMismatch).
	mismatchBlockSize int64
	mismatchSeen      bool // the gauge shows a mismatch

	// mismatchScheme is set when a store was refused because its tokens are EAGLE pairs and the
	// index's keys plain, or the other way round; schemeBigram is what that store carried. The
	// shell reports it (KeySchemeMismatch).
	mismatchScheme, schemeBigram bool

	// malformed is the first malformed event of the last batch (MalformedEvent), nil if none;
	// it points into the batch and is read before the next ApplyPayload.
	malformed *Event

	// Hybrid groups learned from stores that carry kv_cache_spec_kind, one bit per group_idx
	// below 64, so removes (which carry group_idx but no kind) follow their group's filter.
	indexedGroups, skippedGroups uint64
}

// IndexWorkerID is the kvindex worker of a stream, also its `worker` metric label: the worker
// name for rank 0, and "<worker>/dp<rank>" for the other data-parallel ranks (each engine has its
// own block map, §4.2).
func IndexWorkerID(worker string, rank int64) kvindex.WorkerID {
	if rank == 0 {
		return kvindex.WorkerID(worker)
	}
	return kvindex.WorkerID(worker + "/dp" + strconv.FormatInt(rank, 10))
}

// NewApplier returns the Applier of stream worker with data-parallel rank rank. m must not be
// nil; lim bounds decoding (zero fields take the defaults).
func NewApplier(ix *kvindex.Index, worker kvindex.WorkerID, rank int64, m *Metrics, lim Limits) *Applier {
	a := &Applier{ix: ix, worker: worker, rank: rank, lim: lim.withDefaults(), c: newApplyCounters(m, string(worker))}
	a.applyEvents = func(tx kvindex.Tx) {
		a.tx = tx
		for i := range a.batch.Events {
			a.apply(&a.batch.Events[i])
		}
		if a.pos.Valid {
			tx.SetPosition(a.worker, a.pos)
		}
		a.tx = kvindex.Tx{}
	}
	return a
}

// ApplyPayload decodes payload into the applier's reused Batch and applies it. A non-nil error
// means the batch could not be decoded (it wraps ErrMalformedBatch) or was rejected as a whole
// (ErrRankMismatch), and nothing was applied: the caller decides what follows (decode failure
// => clear the stream's index per §2.4 rule 6; rank mismatch => drop only).
//
// The Applier counts every outcome itself: condisagg_kv_messages_dropped_total{reason=
// "decode_error"|"rank_mismatch"} for rejected batches, batches_total and events_total for
// applied ones, and events_skipped_total{reason} for every event or block it skips. Callers
// must not count these again.
func (a *Applier) ApplyPayload(payload []byte) error {
	a.pos = kvindex.Position{}
	return a.applyPayload(payload)
}

// ApplyAt is ApplyPayload for the batch with sequence number seq: with its events, the index
// records the stream's Position (seq and the payload's XXH3-64 digest, the digest the
// sequence machine keeps of its last batch), so a snapshot of the index says exactly which
// batch a replica resuming from it must continue after (kvindex.Position, Stream.Resume).
func (a *Applier) ApplyAt(seq uint64, payload []byte) error {
	a.pos = kvindex.Position{Seq: seq, Digest: xxh3.Hash(payload), Valid: true}
	return a.applyPayload(payload)
}

// Position is the stream position the index holds for this stream (invalid after a clear).
func (a *Applier) Position() kvindex.Position { return a.ix.Position(a.worker) }

func (a *Applier) applyPayload(payload []byte) error {
	if err := a.lim.DecodeBatch(payload, &a.batch); err != nil {
		a.c.decodeErrors.Inc()
		return fmt.Errorf("kvevents: apply batch worker=%s: %w", a.worker, err)
	}
	if a.batch.HasRank && a.batch.Rank != a.rank {
		a.c.rankMismatches.Inc()
		return fmt.Errorf("kvevents: apply batch worker=%s: data_parallel_rank=%d, stream rank %d: %w",
			a.worker, a.batch.Rank, a.rank, ErrRankMismatch)
	}
	// One write lock per batch, not per event: a batch is one engine step's events.
	a.storedInBatch, a.malformed = 0, nil
	a.ix.Update(a.applyEvents)
	a.c.batches.Inc()
	return nil
}

// StoredInLastBatch is the number of BlockStored events of the last applied batch that the
// index accepted: the liveness signal of conditional-disagg.md §8.3 (a batch of removals alone
// says the worker evicts, not that it caches new prompts).
func (a *Applier) StoredInLastBatch() int { return a.storedInBatch }

// MalformedEvent returns the error to report for the first malformed event of the last batch
// (skipped and counted as malformed_event), or nil; it names the field and, where the decoder
// can tell, exactly what is wrong.
func (a *Applier) MalformedEvent() error {
	ev := a.malformed
	if ev == nil {
		return nil
	}
	a.malformed = nil
	if d := ev.MalformedDetail(); d != "" {
		return fmt.Errorf("kvevents: worker %s: malformed %s event skipped: %s", a.worker, ev.Kind, d)
	}
	return fmt.Errorf("kvevents: worker %s: malformed %s event skipped: field %s has the wrong type or an out-of-range value",
		a.worker, ev.Kind, ev.MalformedField)
}

// BlockSizeMismatch returns the error to report when stores of the last batches were refused
// because the engine's block size differs from the router's --block-size (then nothing the
// worker caches can earn credit), and nil otherwise; it resets the report.
func (a *Applier) BlockSizeMismatch() error {
	bs := a.mismatchBlockSize
	if bs == 0 {
		return nil
	}
	a.mismatchBlockSize = 0
	want := a.ix.BlockSize()
	return fmt.Errorf("kvevents: worker %s: KV events carry block_size %d but the router's --block-size (model.block_size) is %d: "+
		"its stores are refused and it gets no cache credit; set model.block_size to %d (the engine's --block-size)",
		a.worker, bs, want, bs)
}

// KeySchemeMismatch returns the error to report when stores of the last batches were refused
// because their tokens are EAGLE pairs and the model's keys plain, or plain ids and the model's
// keys bigrams (then nothing the worker caches can earn credit), and nil otherwise; it resets
// the report.
func (a *Applier) KeySchemeMismatch() error {
	if !a.mismatchScheme {
		return nil
	}
	a.mismatchScheme = false
	if a.schemeBigram {
		return fmt.Errorf("kvevents: worker %s: KV events carry EAGLE [token, token] pairs (SGLang with EAGLE speculative decoding "+
			"keys its pages by token bigrams) but the model keys blocks by plain tokens: its stores are refused and it gets no "+
			"cache credit; set speculative: eagle on the model (model.speculative or models[i].speculative)", a.worker)
	}
	return fmt.Errorf("kvevents: worker %s: KV events carry plain token ids but the model has speculative: eagle (bigram keys): "+
		"its stores are refused and it gets no cache credit; remove speculative: eagle from the model, or serve it with "+
		"SGLang's --speculative-algorithm EAGLE (or EAGLE3, NEXTN)", a.worker)
}

// Batch returns the batch last decoded by ApplyPayload (for its TS), valid until the next call.
func (a *Applier) Batch() *Batch { return &a.batch }

// Clear drops every index entry of the stream (history lost, publisher restart, decode failure).
func (a *Applier) Clear() { a.ix.ClearWorker(a.worker) }

// apply applies one event.
func (a *Applier) apply(ev *Event) {
	switch {
	case ev.Malformed:
		a.c.skip(skipMalformed, 1)
		if a.malformed == nil {
			a.malformed = ev
		}
	case ev.Kind == KindBlockStored:
		a.applyStored(ev)
	case ev.Kind == KindBlockRemoved:
		a.applyRemoved(ev)
	case ev.Kind == KindAllBlocksCleared:
		a.applyCleared()
	default:
		a.applyUnknown(ev)
	}
}

// applyStored applies a BlockStored event (§4.2); the index applies steps 3–5 and the
// duplicate guard of §3.6.
func (a *Applier) applyStored(ev *Event) {
	m, ok := a.medium(ev)
	if !ok {
		return
	}
	if !a.storedGroupIndexed(ev) {
		a.c.skip(skipHybridGroup, 1)
		return
	}
	if ev.HasLoRAID && !ev.HasLoRAName { // §4.2 step 2
		a.c.skip(skipLoRAUnresolved, 1)
		return
	}
	if isRemote(ev.Locality) {
		a.c.skip(skipRemoteLocality, 1)
		return
	}
	a.store = kvindex.Store{
		Medium: m, Parent: ev.Parent, HasParent: ev.HasParent, Hashes: ev.Hashes, Tokens: ev.Tokens, Bigram: ev.Bigram,
		BlockSize: int(ev.BlockSize), LoRA: ev.LoRAName, Salt: ev.Salt, PlainBlocks: ev.PlainBlocks,
	}
	res := a.tx.Store(a.worker, &a.store)
	a.store = kvindex.Store{} // drop references into the payload
	if res.Skip != kvindex.SkipNone {
		switch res.Skip {
		case kvindex.SkipBlockSizeMismatch:
			a.mismatchBlockSize, a.mismatchSeen = ev.BlockSize, true
			a.c.blockSize.Set(float64(ev.BlockSize))
		case kvindex.SkipKeySchemeMismatch:
			a.mismatchScheme, a.schemeBigram = true, ev.Bigram
		}
		a.c.skip(indexSkipReason(res.Skip), 1)
		return
	}
	if len(ev.Tokens) > 0 && a.mismatchSeen {
		a.mismatchSeen = false
		a.c.blockSize.Set(0) // the sizes agree again (the engine or the router changed)
	}
	if res.ShortTokens {
		a.c.skip(skipShortTokens, 1)
	}
	if res.CapacityCleared {
		a.c.capacityClears.Inc()
	}
	a.storedInBatch++
	a.c.stored.Inc()
}

// applyRemoved applies a BlockRemoved event (§4.3) in its own medium only.
func (a *Applier) applyRemoved(ev *Event) {
	m, ok := a.medium(ev)
	if !ok {
		return
	}
	if !a.removedGroupIndexed(ev) {
		a.c.skip(skipHybridGroup, 1)
		return
	}
	if isRemote(ev.Locality) {
		a.c.skip(skipRemoteLocality, 1)
		return
	}
	_, notFound := a.tx.Remove(a.worker, m, ev.Hashes)
	if notFound > 0 {
		a.c.skip(skipBlockNotFound, notFound)
	}
	a.c.removed.Inc()
}

// applyCleared applies AllBlocksCleared (§3.3): the stream's entries go, other streams stay.
func (a *Applier) applyCleared() {
	a.tx.ClearWorker(a.worker)
	a.c.cleared.Inc()
}

// applyUnknown counts an event with an unknown tag (§2.4 rule 4).
func (a *Applier) applyUnknown(ev *Event) {
	a.c.skip(skipUnknownEvent, 1)
	a.c.unknownTag(ev.UnknownTag).Inc()
}

// medium parses the event's medium (§3.4). Non-GPU media are counted per medium and still
// indexed in their own tier; unknown media are counted and the event is skipped.
func (a *Applier) medium(ev *Event) (kvindex.Medium, bool) {
	m, ok := kvindex.ParseMedium(ev.Medium)
	if !ok {
		a.c.nonGPU(nil).Inc()
		a.c.skip(skipUnknownMedium, 1)
		return 0, false
	}
	if m != kvindex.GPU {
		a.c.nonGPU(ev.Medium).Inc()
	}
	return m, true
}

// indexedKind reports whether a kv_cache_spec_kind value names an indexed group (§3.5).
func indexedKind(kind []byte) bool {
	switch string(kind) {
	case "full_attention", "mla_attention", "sink_full_attention":
		return true
	}
	return false
}

// storedGroupIndexed applies the hybrid filter of §3.5 to a store: index kind in
// {full_attention, mla_attention, sink_full_attention}, or, with kind absent, group_idx nil
// or 0. Stores with a kind teach the Applier which groups are indexed, for the removes.
func (a *Applier) storedGroupIndexed(ev *Event) bool {
	if ev.SpecKind == nil {
		return !ev.HasGroup || ev.GroupIdx == 0
	}
	ok := indexedKind(ev.SpecKind)
	if ev.HasGroup && ev.GroupIdx >= 0 && ev.GroupIdx < 64 {
		bit := uint64(1) << ev.GroupIdx
		if ok {
			a.indexedGroups |= bit
		} else {
			a.skippedGroups |= bit
		}
	}
	return ok
}

// removedGroupIndexed filters a remove, which carries group_idx but never a kind: nil group
// and groups learned as indexed pass, groups learned as not indexed are skipped, and unknown
// groups follow the kind-absent rule of §3.5 (only group 0 passes).
func (a *Applier) removedGroupIndexed(ev *Event) bool {
	if !ev.HasGroup {
		return true
	}
	if ev.GroupIdx >= 0 && ev.GroupIdx < 64 {
		bit := uint64(1) << ev.GroupIdx
		switch {
		case a.indexedGroups&bit != 0:
			return true
		case a.skippedGroups&bit != 0:
			return false
		}
	}
	return ev.GroupIdx == 0
}

// isRemote reports locality "REMOTE": the blocks are held by another node, not this engine.
func isRemote(locality []byte) bool { return string(locality) == "REMOTE" }

// skipReason is the closed label set of condisagg_kv_events_skipped_total{reason}.
type skipReason uint8

const (
	skipMalformed         skipReason = iota // a field of the wrong type (§2.4 rule 5)
	skipUnknownEvent                        // unknown tag (§2.4 rule 4)
	skipUnknownMedium                       // medium no tier matches (§3.4)
	skipHybridGroup                         // KV cache group not indexed (§3.5)
	skipLoRAUnresolved                      // lora_id without lora_name (§4.2 step 2)
	skipRemoteLocality                      // locality "REMOTE": blocks held by another node
	skipShortTokens                         // fewer tokens than blocks: only covered blocks indexed (§4.2 step 4)
	skipBlockNotFound                       // one per removed EH the index did not hold (§3.6)
	skipParentNotFound                      // kvindex.SkipParentNotFound (§4.2 step 3)
	skipExcludedChain                       // kvindex.SkipExcludedChain
	skipBlockSizeMismatch                   // kvindex.SkipBlockSizeMismatch (§4.2 step 1)
	skipTokenMismatch                       // kvindex.SkipTokenMismatch (§4.2 step 4)
	skipDuplicateHash                       // kvindex.SkipDuplicateHash (§3.6)
	skipUnresolved                          // kvindex.SkipUnresolved: placeholder store, EH unknown on GPU
	skipCapacity                            // kvindex.SkipCapacity
	skipFenced                              // kvindex.SkipFenced: a reset the router started awaits the engine's clear
	skipKeySchemeMismatch                   // kvindex.SkipKeySchemeMismatch: EAGLE pairs against plain keys, or plain ids against bigram keys
	skipIndexOther                          // a kvindex.SkipReason this package does not know yet
	numSkipReasons
)

var skipLabels = [numSkipReasons]string{
	"malformed_event", "unknown_event", "unknown_medium", "hybrid_group", "lora_unresolved",
	"remote_locality", "short_tokens", "block_not_found", "parent_not_found", "excluded_chain",
	"block_size_mismatch", "token_mismatch", "duplicate_hash", "unresolved", "capacity", "fenced", "key_scheme_mismatch", "index_other",
}

func (r skipReason) String() string { return skipLabels[r] }

// indexSkipReason maps the index's skip reasons onto the closed label set.
func indexSkipReason(r kvindex.SkipReason) skipReason {
	switch r {
	case kvindex.SkipParentNotFound:
		return skipParentNotFound
	case kvindex.SkipExcludedChain:
		return skipExcludedChain
	case kvindex.SkipBlockSizeMismatch:
		return skipBlockSizeMismatch
	case kvindex.SkipTokenMismatch:
		return skipTokenMismatch
	case kvindex.SkipDuplicateHash:
		return skipDuplicateHash
	case kvindex.SkipUnresolved:
		return skipUnresolved
	case kvindex.SkipCapacity:
		return skipCapacity
	case kvindex.SkipFenced:
		return skipFenced
	case kvindex.SkipKeySchemeMismatch:
		return skipKeySchemeMismatch
	}
	return skipIndexOther
}
