package kvindex

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"
	"testing"
)

// model is a naive reference implementation of Index: plain maps, linear scans, no bitsets
// (STYLE.md §2.7). It shares only the key function with the package.
type model struct {
	B, max  int
	workers map[WorkerID]*modelWorker
}

type modelEntry struct {
	key      uint64
	rc       int
	excluded bool
}

type modelWorker struct {
	eh                [NumMedia]map[uint64]*modelEntry
	numGPUBlocks      int
	clears, capClears int
}

func newModel(B, maxBlocks int) *model {
	if maxBlocks == 0 {
		maxBlocks = DefaultMaxBlocksPerWorker
	}
	return &model{B: B, max: maxBlocks, workers: map[WorkerID]*modelWorker{}}
}

func (m *model) add(w WorkerID) *modelWorker {
	if mw := m.workers[w]; mw != nil {
		return mw
	}
	mw := &modelWorker{}
	for i := range mw.eh {
		mw.eh[i] = map[uint64]*modelEntry{}
	}
	m.workers[w] = mw
	return mw
}

func (mw *modelWorker) entries() int { return len(mw.eh[0]) + len(mw.eh[1]) + len(mw.eh[2]) }

func (m *model) store(w WorkerID, s *Store) StoreResult {
	mw := m.add(w)
	if len(s.Hashes) == 0 {
		return StoreResult{}
	}
	med := s.Medium
	seen := map[uint64]bool{}
	for _, h := range s.Hashes {
		if seen[h] || s.HasParent && h == s.Parent {
			return StoreResult{Skip: SkipDuplicateHash}
		}
		seen[h] = true
	}
	n := len(s.Hashes)
	var res StoreResult
	if med != GPU && len(s.Tokens) == 0 {
		for _, h := range s.Hashes {
			if mw.eh[GPU][h] == nil {
				return StoreResult{Skip: SkipUnresolved}
			}
		}
		if mw.entries()+n > m.max {
			return StoreResult{Skip: SkipCapacity}
		}
		for _, h := range s.Hashes {
			g := mw.eh[GPU][h]
			m.put(mw, med, h, g.key, g.excluded)
			if !g.excluded {
				res.Stored++
			}
		}
		return res
	}
	if len(s.Tokens) > 0 && s.BlockSize != m.B {
		return StoreResult{Skip: SkipBlockSizeMismatch}
	}
	var parent uint64
	if s.HasParent {
		p := mw.eh[med][s.Parent]
		if p == nil {
			p = mw.eh[GPU][s.Parent]
		}
		if p == nil {
			return StoreResult{Skip: SkipParentNotFound}
		}
		if p.excluded {
			return StoreResult{Skip: SkipExcludedChain}
		}
		parent = p.key
	}
	if len(s.Tokens) > n*m.B {
		return StoreResult{Skip: SkipTokenMismatch}
	}
	res.ShortTokens = len(s.Tokens) < n*m.B
	if mw.entries()+n > m.max {
		return StoreResult{Skip: SkipCapacity}
	}
	// A parentless re-announcement of blocks already held (kv_cache_report_mode "full") adds
	// nothing.
	covered := min(n, len(s.Tokens)/m.B)
	if !s.HasParent && covered > 0 {
		held := true
		for _, h := range s.Hashes[:covered] {
			held = held && mw.eh[med][h] != nil
		}
		if held {
			return res
		}
	}
	keys := AppendKeys(nil, parent, s.Tokens, m.B, s.LoRA)
	if !s.HasParent {
		keys = AppendRequestKeys(nil, s.Tokens, m.B, s.LoRA, s.Salt)
	}
	for j, h := range s.Hashes {
		if j >= s.PlainBlocks {
			m.put(mw, med, h, 0, true)
			continue
		}
		if j >= len(keys) {
			break
		}
		m.put(mw, med, h, keys[j], false)
		res.Stored++
	}
	if med == GPU && mw.numGPUBlocks > 0 && len(mw.eh[GPU]) > mw.numGPUBlocks {
		m.clear(mw)
		mw.capClears++
		res.CapacityCleared = true
	}
	return res
}

func (m *model) put(mw *modelWorker, med Medium, h, key uint64, excluded bool) {
	if e := mw.eh[med][h]; e != nil {
		e.rc++
		return
	}
	mw.eh[med][h] = &modelEntry{key: key, rc: 1, excluded: excluded}
}

func (m *model) remove(w WorkerID, med Medium, hashes []uint64) (removed, notFound int) {
	mw := m.workers[w]
	if mw == nil {
		return 0, len(hashes)
	}
	for _, h := range hashes {
		e := mw.eh[med][h]
		if e == nil {
			notFound++
			continue
		}
		removed++
		if e.rc--; e.rc == 0 {
			delete(mw.eh[med], h)
		}
	}
	return removed, notFound
}

func (m *model) clear(mw *modelWorker) {
	for i := range mw.eh {
		mw.eh[i] = map[uint64]*modelEntry{}
	}
	mw.clears++
}

func (m *model) setCapacity(w WorkerID, n int) {
	mw := m.add(w)
	mw.numGPUBlocks = max(n, 0)
	if mw.numGPUBlocks > 0 && len(mw.eh[GPU]) > mw.numGPUBlocks {
		m.clear(mw)
		mw.capClears++
	}
}

// holds reports by linear scan whether mw holds key in medium med.
func (mw *modelWorker) holds(med Medium, key uint64) bool {
	for _, e := range mw.eh[med] {
		if !e.excluded && e.key == key {
			return true
		}
	}
	return false
}

func (m *model) overlap(keys []uint64) []WorkerOverlap {
	var out []WorkerOverlap
	if len(keys) == 0 {
		return out
	}
	for w, mw := range m.workers {
		if !mw.holds(GPU, keys[0]) && !mw.holds(CPU, keys[0]) && !mw.holds(Disk, keys[0]) {
			continue
		}
		o := WorkerOverlap{Worker: w}
		i := 0
		for i < len(keys) && mw.holds(GPU, keys[i]) {
			i++
		}
		o.GPU = i
		for ; i < len(keys); i++ {
			if mw.holds(CPU, keys[i]) {
				o.CPU++
			} else if mw.holds(Disk, keys[i]) {
				o.Disk++
			} else {
				break
			}
		}
		out = append(out, o)
	}
	sortOverlaps(out)
	return out
}

func (m *model) stats(w WorkerID) (WorkerStats, bool) {
	mw := m.workers[w]
	if mw == nil {
		return WorkerStats{}, false
	}
	st := WorkerStats{Clears: mw.clears, CapacityClears: mw.capClears}
	for i := range mw.eh {
		st.Blocks[i] = len(mw.eh[i])
	}
	return st, true
}

// numKeys is the number of distinct router keys held anywhere.
func (m *model) numKeys() int {
	keys := map[uint64]bool{}
	for _, mw := range m.workers {
		for _, t := range mw.eh {
			for _, e := range t {
				if !e.excluded {
					keys[e.key] = true
				}
			}
		}
	}
	return len(keys)
}

func sortOverlaps(o []WorkerOverlap) {
	slices.SortFunc(o, func(a, b WorkerOverlap) int { return cmp.Compare(a.Worker, b.Worker) })
}

// coverage counts what a random run exercised, so that a test can insist the interesting cases
// happened.
type coverage struct {
	skips             [SkipCapacity + 1]int
	stored, short     int
	gpu, cpu, disk    int // overlap results with a non-zero count of that tier
	capClears, clears int
	longest           int // longest GPU+CPU+Disk prefix seen
	spilled           int // checks that found a GPU row spilled to a dense bitset (rows.go)
}

// compareWithModel checks every observable of ix against m for the given queries.
func compareWithModel(t testing.TB, ix *Index, m *model, queries [][]uint64, step string, cov *coverage) {
	t.Helper()
	var out Overlaps
	for qi, q := range queries {
		ix.Overlap(q, &out)
		got := slices.Clone(out.Workers)
		sortOverlaps(got)
		want := m.overlap(q)
		if !slices.Equal(got, want) {
			t.Fatalf("%s: overlap of query %d (%d keys):\n got  %+v\n want %+v", step, qi, len(q), got, want)
		}
		for _, o := range got {
			cov.longest = max(cov.longest, o.GPU+o.CPU+o.Disk)
			cov.gpu += min(o.GPU, 1)
			cov.cpu += min(o.CPU, 1)
			cov.disk += min(o.Disk, 1)
		}
	}
	for w := range m.workers {
		gs, gok := ix.Stats(w)
		ws, wok := m.stats(w)
		if gs != ws || gok != wok {
			t.Fatalf("%s: Stats(%s) = %+v %v, want %+v %v", step, w, gs, gok, ws, wok)
		}
	}
	var ids []WorkerID
	for w := range m.workers {
		ids = append(ids, w)
	}
	slices.Sort(ids)
	if got := ix.Workers(); !slices.Equal(got, ids) {
		t.Fatalf("%s: Workers() = %v, want %v", step, got, ids)
	}
	if got, want := ix.NumKeys(), m.numKeys(); got != want {
		t.Fatalf("%s: NumKeys() = %d, want %d", step, got, want)
	}
	if n := checkGPURows(t, ix, step); n > 0 {
		cov.spilled++
	}
}

// checkGPURows checks the representation of the GPU bits (rows.go): a spilled row has holders
// in two groups at least, a free dense bitset is all zero, and a row's bits are the same read
// through gpu and through hasGPU. It returns the number of spilled rows.
func checkGPURows(t testing.TB, ix *Index, step string) int {
	t.Helper()
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	k := &ix.keys
	spilledRows := 0
	buf := make([]uint64, k.words)
	for r := range uint32(len(k.rows) / rowStride) {
		if at := k.gpuAt; at != nil && at[r] == spilledGroup {
			spilledRows++
			groups := 0
			for _, w := range k.spilledBits(r) {
				groups += min(bits.OnesCount64(w), 1)
			}
			if groups < 2 {
				t.Fatalf("%s: row %d spilled with holders in %d groups", step, r, groups)
			}
		}
		bs := k.gpu(r, buf)
		for slot := range uint32(64 * k.words) {
			if bs[slot/64]&(1<<(slot%64)) != 0 != k.hasGPU(r, slot) {
				t.Fatalf("%s: row %d slot %d: gpu and hasGPU disagree", step, r, slot)
			}
		}
	}
	for _, d := range k.denseFree {
		if !allZero(k.dense[int(d)*k.words:][:k.words]) {
			t.Fatalf("%s: free dense bitset %d is not empty", step, d)
		}
	}
	return spilledRows
}

// chooser supplies the random decisions of an operation sequence.
type chooser interface {
	intn(n int) int // in [0, n); n > 0
}

// opGen generates operation sequences over a small universe so that keys, hashes and parents
// collide often: a few documents sharing prefixes, engine hashes derived from content.
type opGen struct {
	B       int
	docs    [][]uint32 // token sequences, whole blocks
	workers []WorkerID
	loras   [][]byte
	gpuOnly bool // every event on GPU (the workers stay searchable, overlap_search.go)
}

func newOpGen(B, nWorkers int) *opGen {
	g := &opGen{B: B, loras: [][]byte{nil, []byte("sql-lora")}}
	for i := range nWorkers {
		g.workers = append(g.workers, WorkerID(fmt.Sprintf("w%02d", i)))
	}
	base := make([]uint32, 36*B) // over two Overlap lookup chunks
	for i := range base {
		base[i] = uint32(i%5 + 1)
	}
	for d := range 4 {
		doc := slices.Clone(base)
		for i := (3 + 2*d) * B; i < len(doc); i++ {
			doc[i] = uint32(d*7 + i%3)
		}
		g.docs = append(g.docs, doc)
	}
	return g
}

// eh returns the engine hash of block i of doc d under LoRA l, with an alternative salt alt
// (a second EH for the same content, as different extra keys would give).
func (g *opGen) eh(d, i, l, alt int) uint64 {
	k := Keys(g.docs[d][:(i+1)*g.B], g.B, g.loras[l])[i]
	return k ^ 0x5bd1e995_00000000 ^ uint64(alt)*0x9e3779b97f4a7c15
}

func (g *opGen) queries() [][]uint64 {
	var qs [][]uint64
	for _, l := range g.loras {
		for _, doc := range g.docs {
			qs = append(qs, Keys(doc, g.B, l))
		}
	}
	qs = append(qs, Keys(g.docs[0][:3*g.B], g.B, nil), Keys(g.docs[1][:17*g.B], g.B, nil), nil)
	return qs
}

// step applies one random operation to ix and m and checks that their results agree.
func (g *opGen) step(t testing.TB, c chooser, ix *Index, m *model, cov *coverage) string {
	t.Helper()
	w := g.workers[c.intn(len(g.workers))]
	med := Medium(c.intn(NumMedia))
	if c.intn(2) == 0 || g.gpuOnly {
		med = GPU
	}
	switch op := c.intn(24); {
	case op < 13:
		s := g.store(c, med, m.workers[w])
		var got StoreResult
		if c.intn(2) == 0 {
			got = ix.Store(w, s)
		} else {
			ix.Update(func(tx Tx) { got = tx.Store(w, s) })
		}
		want := m.store(w, s)
		if got != want {
			t.Fatalf("Store(%s, %+v) = %+v, want %+v", w, *s, got, want)
		}
		cov.skips[got.Skip]++
		cov.stored += min(got.Stored, 1)
		if got.ShortTokens {
			cov.short++
		}
		if got.CapacityCleared {
			cov.capClears++
		}
		return fmt.Sprintf("store %s %+v -> %+v", w, *s, got)
	case op < 20:
		var hs []uint64
		for range 1 + c.intn(3) {
			d, l := c.intn(len(g.docs)), c.intn(len(g.loras))
			hs = append(hs, g.eh(d, c.intn(len(g.docs[d])/g.B), l, c.intn(3)/2))
		}
		if c.intn(8) == 0 {
			hs = append(hs, uint64(c.intn(5)))
		}
		var r1, n1 int
		if c.intn(2) == 0 {
			r1, n1 = ix.Remove(w, med, hs)
		} else {
			ix.Update(func(tx Tx) { r1, n1 = tx.Remove(w, med, hs) })
		}
		r2, n2 := m.remove(w, med, hs)
		if r1 != r2 || n1 != n2 {
			t.Fatalf("Remove(%s, %v, %x) = %d, %d, want %d, %d", w, med, hs, r1, n1, r2, n2)
		}
		return fmt.Sprintf("remove %s %v %x", w, med, hs)
	case op < 21:
		if c.intn(2) == 0 {
			ix.ClearWorker(w)
		} else {
			ix.Update(func(tx Tx) { tx.ClearWorker(w) })
		}
		cov.clears++
		if mw := m.workers[w]; mw != nil {
			m.clear(mw)
		}
		return "clear " + string(w)
	case op < 22:
		ix.RemoveWorker(w)
		delete(m.workers, w)
		return "remove worker " + string(w)
	default:
		n := c.intn(200) - 20 // mostly unknown (<= 0) or roomy
		if c.intn(4) == 0 {
			n = c.intn(30)
		}
		ix.SetCapacity(w, n)
		m.setCapacity(w, n)
		return fmt.Sprintf("capacity %s %d", w, n)
	}
}

// store builds a random Store: mostly well-formed chains of a document, sometimes broken.
// Most stores continue the chain that mw (nil for a new worker) already holds.
func (g *opGen) store(c chooser, med Medium, mw *modelWorker) *Store {
	d, l := c.intn(len(g.docs)), c.intn(len(g.loras))
	alt := c.intn(4) / 3
	nb := len(g.docs[d]) / g.B
	start := c.intn(nb)
	if c.intn(3) > 0 {
		start = 0
		for mw != nil && start < nb-1 && (mw.eh[med][g.eh(d, start, l, alt)] != nil || mw.eh[GPU][g.eh(d, start, l, alt)] != nil) {
			start++
		}
	}
	n := 1 + c.intn(min(8, nb-start))
	s := &Store{Medium: med, BlockSize: g.B, LoRA: g.loras[l], PlainBlocks: n}
	if c.intn(6) == 0 {
		s.PlainBlocks = c.intn(n + 1)
	}
	for i := start; i < start+n; i++ {
		s.Hashes = append(s.Hashes, g.eh(d, i, l, alt))
	}
	if start > 0 {
		s.HasParent = true
		s.Parent = g.eh(d, start-1, l, c.intn(4)/3)
	}
	s.Tokens = slices.Clone(g.docs[d][start*g.B : (start+n)*g.B])
	switch c.intn(24) {
	case 0:
		s.Tokens = s.Tokens[:c.intn(len(s.Tokens))] // short
	case 1:
		s.Tokens = append(s.Tokens, 9) // long
	case 2:
		s.BlockSize = g.B + 1
	case 3:
		s.Hashes = append(s.Hashes, s.Hashes[0]) // repeated
	case 4:
		if s.HasParent {
			s.Hashes[len(s.Hashes)-1] = s.Parent // contains its parent
		}
	case 5:
		s.HasParent, s.Parent = true, uint64(c.intn(1000)) // unknown parent
	case 6, 7, 8:
		if med != GPU { // placeholder (OffloadingConnector default)
			s.Tokens, s.BlockSize, s.HasParent, s.Parent = nil, 0, false, 0
		}
	}
	return s
}
