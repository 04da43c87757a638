package kvindex

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/condisagg/condisagg/internal/openaddr"
)

// A snapshot is the whole index in a compact, versioned byte encoding, so that a starting
// replica can copy a peer's index instead of waiting for the engines' events (Export, Import).
// Layout of version 1 (integers are unsigned LEB128 varints unless said otherwise):
//
//	magic "cdkvix" | version byte 1 | block size
//	rows: count, then per key row: key (8 bytes LE), parent (0 = first block of a sequence,
//	      1 = unknown, i+2 = the i-th row of this list, which must come earlier)
//	workers: count, then per worker: id length, id bytes, flags byte (bit 0 fenced,
//	      bit 1 position valid), [position seq, position digest (8 bytes LE)],
//	      then for GPU, CPU, Disk: entry count, per entry: engine hash (8 bytes LE),
//	      row (0 = excluded entry, i+1 = the i-th row), references - 1
//
// Rows come parents first, so parent links can be rebuilt in one pass and never form a cycle.
// Nothing in the encoding depends on the exporting process's slot numbers or table layout.

const (
	snapshotMagic   = "cdkvix"
	snapshotVersion = 1
	// snapshotMaxRefs bounds one entry's reference count: a real count is at most the number
	// of stores of one engine hash, far below it.
	snapshotMaxRefs = 1 << 31
	flagFenced      = 1 << 0
	flagPosition    = 1 << 1
)

// ErrSnapshotTooLarge is returned by Export when the encoding would exceed its byte limit.
var ErrSnapshotTooLarge = errors.New("kvindex: snapshot exceeds its size limit")

// ErrNotEmpty is returned by Import into an index that already holds entries.
var ErrNotEmpty = errors.New("kvindex: import into an index that holds entries")

// SnapshotStats describes one exported or imported snapshot.
type SnapshotStats struct {
	Workers int // workers, including those without entries (they may carry a position)
	Keys    int // key rows, including rows kept only for their children
	Entries int // engine-hash entries over all workers and media
	Bytes   int // encoded size
}

// Export encodes the whole index, every worker's entries with its Position taken under the
// same read lock, so the snapshot is one consistent point of every stream. It fails with
// ErrSnapshotTooLarge as soon as the encoding passes maxBytes (<= 0: no limit). Events wait
// while it runs; lookups do not.
func (ix *Index) Export(maxBytes int) ([]byte, SnapshotStats, error) {
	if maxBytes <= 0 {
		maxBytes = math.MaxInt
	}
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	var st SnapshotStats
	order, at := ix.rowOrder()
	st.Keys = len(order)
	b := make([]byte, 0, min(maxBytes, 64+len(order)*10))
	b = append(b, snapshotMagic...)
	b = append(b, snapshotVersion)
	b = binary.AppendUvarint(b, blockSizeWord(ix.cfg))
	b = binary.AppendUvarint(b, uint64(len(order)))
	for _, r := range order {
		b = binary.LittleEndian.AppendUint64(b, ix.keys.key(r))
		switch p := ix.keys.parent[r]; p {
		case rootRow:
			b = append(b, 0)
		case unknownRow, noRow:
			b = append(b, 1)
		default:
			b = binary.AppendUvarint(b, uint64(at[p])+2)
		}
		if len(b) > maxBytes {
			return nil, st, fmt.Errorf("kvindex: export keys=%d bytes>%d: %w", len(order), maxBytes, ErrSnapshotTooLarge)
		}
	}
	workers := make([]*worker, 0, len(ix.ids))
	for _, wk := range ix.slots {
		if wk != nil {
			workers = append(workers, wk)
		}
	}
	slices.SortFunc(workers, func(a, b *worker) int { return cmpString(string(a.id), string(b.id)) })
	st.Workers = len(workers)
	b = binary.AppendUvarint(b, uint64(len(workers)))
	for _, wk := range workers {
		b = ix.appendWorker(b, wk, at)
		for m := range NumMedia {
			st.Entries += wk.eh[m].len()
		}
		if len(b) > maxBytes {
			return nil, st, fmt.Errorf("kvindex: export worker=%s bytes>%d: %w", wk.id, maxBytes, ErrSnapshotTooLarge)
		}
	}
	st.Bytes = len(b)
	return b, st, nil
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// appendWorker encodes wk; at maps rows to their position in the exported row list.
func (ix *Index) appendWorker(b []byte, wk *worker, at []uint32) []byte {
	b = binary.AppendUvarint(b, uint64(len(wk.id)))
	b = append(b, wk.id...)
	var flags byte
	if wk.fence != 0 {
		flags |= flagFenced
	}
	if wk.pos.Valid {
		flags |= flagPosition
	}
	b = append(b, flags)
	if wk.pos.Valid {
		b = binary.AppendUvarint(b, wk.pos.Seq)
		b = binary.LittleEndian.AppendUint64(b, wk.pos.Digest)
	}
	for m := range NumMedia {
		t := &wk.eh[m]
		b = binary.AppendUvarint(b, uint64(t.len()))
		for eh, meta := range t.tab.All() {
			b = binary.LittleEndian.AppendUint64(b, eh)
			if ref := metaRef(meta); ref == excludedRef {
				b = append(b, 0)
			} else {
				b = binary.AppendUvarint(b, uint64(at[ref])+1)
			}
			refs := uint64(meta>>metaRCShift) + 1
			if meta>>metaRCShift == metaRCMap {
				refs = uint64(t.rc[eh])
			}
			b = binary.AppendUvarint(b, refs-1)
		}
	}
	return b
}

// rowOrder lists every row in the key table (live or dead) with parents before children, and
// returns, by row, its position in that list.
func (ix *Index) rowOrder() (order []uint32, at []uint32) {
	t := &ix.keys
	at = make([]uint32, len(t.rows)/rowStride)
	order = make([]uint32, 0, t.index.n)
	var stack []uint32
	for _, s := range t.index.slots {
		if s == 0 {
			continue
		}
		if r := uint32(s) - 1; t.parent[r] >= unknownRow {
			stack = append(stack, r)
		}
		for len(stack) > 0 {
			r := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			at[r] = uint32(len(order))
			order = append(order, r)
			for c := t.child[r]; c != noRow; c = t.next[c] {
				stack = append(stack, c)
			}
		}
	}
	return order, at
}

// snapshot is a decoded, validated snapshot, applied by Import in one write lock.
type snapshot struct {
	rows    []snapRow
	workers []snapWorker
	entries int
}

type snapRow struct {
	key    uint64
	parent uint32 // rootRow, unknownRow or the index of an earlier row
}

type snapEntry struct {
	eh   uint64
	row  uint32 // excludedRef or a row index
	refs uint32
}

type snapWorker struct {
	id      WorkerID
	fenced  bool
	pos     Position
	entries [NumMedia][]snapEntry
}

// Import loads a snapshot made by Export into ix, which must hold no entries (ErrNotEmpty);
// workers ix already knows keep their capacity. The snapshot is decoded and checked whole
// before the index changes, so a bad one changes nothing; errors name what is wrong and where.
// The block size must equal ix's. Imported workers are closed or not as their entries say,
// a fenced worker gets a new fence, and each worker's Position is restored.
func (ix *Index) Import(data []byte) (SnapshotStats, error) {
	s, err := decodeSnapshot(data, ix.cfg)
	if err != nil {
		return SnapshotStats{}, err
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.keys.index.n != 0 {
		return SnapshotStats{}, fmt.Errorf("kvindex: import: index holds %d keys: %w", ix.keys.index.n, ErrNotEmpty)
	}
	fresh := 0
	for _, sw := range s.workers {
		if ix.lookup(sw.id) == nil {
			fresh++
		}
	}
	if len(ix.ids)+fresh > maxSlots {
		return SnapshotStats{}, fmt.Errorf("kvindex: import workers=%d: more than %d worker slots", len(ix.ids)+fresh, maxSlots)
	}
	rows := make([]uint32, len(s.rows))
	ix.keys.index.reserve(len(s.rows))
	for i, sr := range s.rows {
		parent := sr.parent
		if parent < unknownRow {
			parent = rows[parent]
		}
		rows[i], _ = ix.keys.findOrAdd(sr.key, parent)
	}
	for i := range s.workers {
		ix.importWorker(&s.workers[i], rows)
	}
	ix.dropBareRows(rows)
	return SnapshotStats{Workers: len(s.workers), Keys: len(rows), Entries: s.entries, Bytes: len(data)}, nil
}

// importWorker adds sw's entries; rows maps snapshot rows to the index's rows.
func (ix *Index) importWorker(sw *snapWorker, rows []uint32) {
	wk := ix.add(sw.id)
	for m := range NumMedia {
		tbl := &wk.eh[m]
		tbl.tab.Reserve(len(sw.entries[m]))
		for _, e := range sw.entries[m] {
			ref := e.row
			if ref != excludedRef {
				ref = rows[ref]
			}
			at, _ := tbl.slot(e.eh) // unique: decodeSnapshot checked it
			tbl.put(at, e.eh, ref)
			tbl.setRefs(at, e.refs)
			ix.addBacking(wk, Medium(m), ref)
		}
	}
	// Closed is a property of the entries alone: every GPU key with its parent key on GPU.
	wk.unclosed = false
	for _, meta := range wk.eh[GPU].tab.All() {
		r := metaRef(meta)
		if r == excludedRef {
			continue
		}
		if p := ix.keys.parent[r]; p != rootRow && (p >= unknownRow || !ix.keys.has(p, GPU, wk.slot)) {
			wk.unclosed = true
			break
		}
	}
	if sw.fenced {
		ix.fences++
		wk.fence = FenceID(ix.fences)
	}
	wk.pos = sw.pos
	ix.checkCapacity(wk)
	ix.refreshFast(wk)
}

// dropBareRows settles the rows that no imported entry backs, children before parents (the
// reverse of the parents-first order): one with children stays dead, one without goes.
func (ix *Index) dropBareRows(rows []uint32) {
	t := &ix.keys
	for _, r := range slices.Backward(rows) {
		if t.hasLower(r) || !t.gpuEmpty(r) {
			continue
		}
		if t.child[r] != noRow {
			t.dead++
			continue
		}
		t.index.delete(t.key(r), r)
		t.free = append(t.free, r)
		if t.parent[r] < unknownRow {
			t.unlink(r)
		}
	}
}

// snapReader reads a snapshot, keeping the first error.
type snapReader struct {
	b   []byte
	off int
	err error
}

func (r *snapReader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("kvindex: import: byte %d: "+format, append([]any{r.off}, args...)...)
	}
}

func (r *snapReader) uvarint(what string) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b[r.off:])
	if n <= 0 {
		r.fail("%s: truncated or overlong varint", what)
		return 0
	}
	r.off += n
	return v
}

func (r *snapReader) u64(what string) uint64 {
	if r.err != nil {
		return 0
	}
	if len(r.b)-r.off < 8 {
		r.fail("%s: truncated", what)
		return 0
	}
	v := binary.LittleEndian.Uint64(r.b[r.off:])
	r.off += 8
	return v
}

// count reads a list length and checks that the rest of the input can hold that many items of
// at least minSize bytes each, so a forged length cannot make the decoder allocate more than
// the input's size.
func (r *snapReader) count(what string, minSize int) int {
	n := r.uvarint(what)
	if r.err == nil && n > uint64((len(r.b)-r.off)/minSize) {
		r.fail("%s %d: more than the %d remaining bytes can hold", what, n, len(r.b)-r.off)
		return 0
	}
	return int(n)
}

// decodeSnapshot decodes and checks a snapshot against cfg (with defaults).
func decodeSnapshot(data []byte, cfg Config) (*snapshot, error) {
	if len(data) < len(snapshotMagic)+1 || string(data[:len(snapshotMagic)]) != snapshotMagic {
		return nil, errors.New("kvindex: import: not a snapshot (magic \"cdkvix\" missing)")
	}
	if v := data[len(snapshotMagic)]; v != snapshotVersion {
		return nil, fmt.Errorf("kvindex: import: snapshot version %d, this build reads version %d", v, snapshotVersion)
	}
	r := &snapReader{b: data, off: len(snapshotMagic) + 1}
	if w := r.uvarint("block size"); r.err == nil && w != blockSizeWord(cfg) {
		if bs := w & (1<<keySchemeShift - 1); bs != uint64(cfg.BlockSize) {
			return nil, fmt.Errorf("kvindex: import: snapshot block size %d differs from this index's %d: "+
				"every replica must use the same model.block_size", bs, cfg.BlockSize)
		}
		return nil, fmt.Errorf("kvindex: import: snapshot keys are %s, this index's %s: "+
			"every replica must use the same model.speculative", KeyScheme(w>>keySchemeShift), cfg.Keys)
	}
	s := &snapshot{}
	s.rows = decodeRows(r)
	s.workers = decodeWorkers(r, len(s.rows), cfg.MaxBlocksPerWorker, &s.entries)
	if r.err == nil && r.off != len(data) {
		r.fail("%d trailing bytes", len(data)-r.off)
	}
	if r.err != nil {
		return nil, r.err
	}
	return s, nil
}

func decodeRows(r *snapReader) []snapRow {
	n := r.count("key rows", 9)
	if n > maxRefs {
		r.fail("key rows %d: more than %d", n, maxRefs)
		return nil
	}
	rows := make([]snapRow, 0, n)
	var seen openaddr.Table[uint32] // a set: Go's map is several times slower at a million keys
	seen.Reserve(n)
	for i := range n {
		key := r.u64("key")
		p := r.uvarint("parent")
		if r.err != nil {
			return nil
		}
		sr := snapRow{key: key, parent: rootRow}
		switch {
		case p == 1:
			sr.parent = unknownRow
		case p >= 2 && p-2 < uint64(i):
			sr.parent = uint32(p - 2)
		case p != 0:
			r.fail("row %d parent %d: must name an earlier row (2..%d), 0 or 1", i, p, i+1)
			return nil
		}
		at, dup := seen.Slot(key)
		if dup {
			r.fail("row %d key %#x: repeated", i, key)
			return nil
		}
		seen.Put(at, key, 1)
		rows = append(rows, sr)
	}
	return rows
}

func decodeWorkers(r *snapReader, nRows, maxEntries int, total *int) []snapWorker {
	n := r.count("workers", 4)
	if n > maxSlots {
		r.fail("workers %d: more than %d", n, maxSlots)
		return nil
	}
	ws := make([]snapWorker, 0, n)
	ids := make(map[WorkerID]struct{}, n)
	var ehs openaddr.Table[uint32]
	for range n {
		var sw snapWorker
		l := r.count("worker id length", 1)
		if r.err != nil {
			return nil
		}
		sw.id = WorkerID(r.b[r.off : r.off+l])
		r.off += l
		if _, dup := ids[sw.id]; dup || l == 0 {
			r.fail("worker %q: empty or repeated", sw.id)
			return nil
		}
		ids[sw.id] = struct{}{}
		flags := r.uvarint("flags")
		if flags&^(flagFenced|flagPosition) != 0 {
			r.fail("worker %s flags %#x: unknown bits", sw.id, flags)
		}
		sw.fenced = flags&flagFenced != 0
		if flags&flagPosition != 0 {
			sw.pos = Position{Seq: r.uvarint("position seq"), Digest: r.u64("position digest"), Valid: true}
		}
		entries := 0
		for m := range NumMedia {
			sw.entries[m] = decodeEntries(r, sw.id, Medium(m), nRows, &ehs)
			entries += len(sw.entries[m])
		}
		if entries > maxEntries {
			r.fail("worker %s: %d entries, more than max_blocks_per_worker %d", sw.id, entries, maxEntries)
		}
		if r.err != nil {
			return nil
		}
		*total += entries
		ws = append(ws, sw)
	}
	return ws
}

// decodeEntries reads one worker's entries in medium m; seen is scratch for the duplicate check.
func decodeEntries(r *snapReader, w WorkerID, m Medium, nRows int, seen *openaddr.Table[uint32]) []snapEntry {
	n := r.count("entries", 10)
	es := make([]snapEntry, 0, n)
	seen.Clear()
	seen.Reserve(n)
	for range n {
		e := snapEntry{eh: r.u64("engine hash"), row: excludedRef}
		row := r.uvarint("entry row")
		refs := r.uvarint("entry references")
		if r.err != nil {
			return nil
		}
		if row > uint64(nRows) {
			r.fail("worker %s %s hash %#x: row %d of %d rows", w, m, e.eh, row-1, nRows)
			return nil
		}
		if row > 0 {
			e.row = uint32(row - 1)
		}
		if refs >= snapshotMaxRefs {
			r.fail("worker %s %s hash %#x: %d references", w, m, e.eh, refs+1)
			return nil
		}
		e.refs = uint32(refs + 1)
		at, dup := seen.Slot(e.eh)
		if dup {
			r.fail("worker %s %s hash %#x: repeated", w, m, e.eh)
			return nil
		}
		seen.Put(at, e.eh, 1)
		es = append(es, e)
	}
	return es
}

// keySchemeShift places the key scheme above the block size in the snapshot's block size word:
// a plain index writes its block size alone (as before schemes existed), a bigram index
// bs | 1<<40, which a reader of either kind or an older build refuses when it is not its own.
const keySchemeShift = 40

func blockSizeWord(cfg Config) uint64 {
	return uint64(cfg.BlockSize) | uint64(cfg.Keys)<<keySchemeShift
}
