package tokenizer

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// mergeRule is the result of merging one adjacent pair of ids.
type mergeRule struct {
	rank uint32 // position in the merges list: lower merges first
	id   uint32 // id of the merged token
}

func pairKey(a, b uint32) uint64 { return uint64(a)<<32 | uint64(b) }

// bpe is a BPE model as Hugging Face tokenizers runs it (no dropout, no
// continuing-subword prefix, no end-of-word suffix). It is immutable after load.
type bpe struct {
	// vocab maps a piece to its id. For byte-level models the key is the raw byte
	// string the byte-level token stands for, so input never has to be remapped.
	vocab        map[string]uint32
	merges       map[uint64]mergeRule
	byteLevel    bool
	ignoreMerges bool
	byteIDs      [256]int64 // byte-level: id of the one-byte token, -1 if absent
	byteFallback bool
	fallbackIDs  [256]int64 // byte fallback: id of "<0xXX>", -1 if absent
	unkID        int64      // -1 when the model has no unk token
	fuseUnk      bool
	words        *wordCache // recently merged words; has its own locks
}

func newBPE(ms *modelSpec, byteLevel bool) (*bpe, error) {
	if ms.Type != "BPE" {
		return nil, fmt.Errorf("tokenizer: model type %q: %w", ms.Type, ErrUnsupported)
	}
	if ms.Dropout != nil && *ms.Dropout != 0 {
		return nil, fmt.Errorf("tokenizer: BPE dropout=%v: %w", *ms.Dropout, ErrUnsupported)
	}
	if ms.ContinuingSubwordPrefix != nil && *ms.ContinuingSubwordPrefix != "" {
		return nil, fmt.Errorf("tokenizer: BPE continuing_subword_prefix=%q: %w", *ms.ContinuingSubwordPrefix, ErrUnsupported)
	}
	if ms.EndOfWordSuffix != nil && *ms.EndOfWordSuffix != "" {
		return nil, fmt.Errorf("tokenizer: BPE end_of_word_suffix=%q: %w", *ms.EndOfWordSuffix, ErrUnsupported)
	}
	m := &bpe{
		vocab:        make(map[string]uint32, len(ms.Vocab)),
		byteLevel:    byteLevel,
		ignoreMerges: ms.IgnoreMerges,
		byteFallback: ms.ByteFallback,
		unkID:        -1,
		fuseUnk:      ms.FuseUnk,
		words:        &wordCache{},
	}
	for i := range m.byteIDs {
		m.byteIDs[i], m.fallbackIDs[i] = -1, -1
	}
	for tok, id := range ms.Vocab {
		key := tok
		if byteLevel {
			raw, ok := decodeByteLevel(tok)
			if !ok {
				// Not reachable from byte-level input; keep it out of the table.
				continue
			}
			key = raw
		}
		m.vocab[key] = id
	}
	if byteLevel {
		for b := 0; b < 256; b++ {
			if id, ok := m.vocab[string([]byte{byte(b)})]; ok {
				m.byteIDs[b] = int64(id)
			}
		}
	}
	if m.byteFallback {
		for b := 0; b < 256; b++ {
			if id, ok := ms.Vocab[fmt.Sprintf("<0x%02X>", b)]; ok {
				m.fallbackIDs[b] = int64(id)
			}
		}
	}
	if ms.UnkToken != nil {
		id, ok := ms.Vocab[*ms.UnkToken]
		if !ok {
			return nil, fmt.Errorf("tokenizer: unk_token %q is not in the vocabulary", *ms.UnkToken)
		}
		m.unkID = int64(id)
	}
	var err error
	if m.merges, err = buildMerges(ms); err != nil {
		return nil, err
	}
	return m, nil
}

// buildMerges maps each merge pair of ids to its rank and result; the first
// occurrence of a repeated pair wins.
func buildMerges(ms *modelSpec) (map[uint64]mergeRule, error) {
	pairs, err := parseMerges(ms.Merges)
	if err != nil {
		return nil, err
	}
	merges := make(map[uint64]mergeRule, len(pairs))
	for rank, p := range pairs {
		a, okA := ms.Vocab[p[0]]
		b, okB := ms.Vocab[p[1]]
		c, okC := ms.Vocab[p[0]+p[1]]
		if !okA || !okB || !okC {
			return nil, fmt.Errorf("tokenizer: merge %d %q+%q: token missing from the vocabulary", rank, p[0], p[1])
		}
		k := pairKey(a, b)
		if _, dup := merges[k]; !dup {
			merges[k] = mergeRule{rank: uint32(rank), id: c}
		}
	}
	return merges, nil
}

// symbol is one node of the doubly linked list a word is merged on.
type symbol struct {
	id         uint32
	prev, next int32 // -1 at the ends
	alive      bool
}

// scratch holds reusable buffers for one encode call.
type scratch struct {
	syms []symbol
	heap mergeHeap
}

// encodeWord appends the ids of one pre-tokenized piece to dst.
func (m *bpe) encodeWord(dst []uint32, word string, sc *scratch) []uint32 {
	if len(word) == 0 {
		return dst
	}
	if m.ignoreMerges {
		if id, ok := m.vocab[word]; ok {
			return append(dst, id)
		}
	}
	if len(word) == 1 && m.byteLevel && m.byteIDs[word[0]] >= 0 {
		return append(dst, uint32(m.byteIDs[word[0]]))
	}
	cacheable := len(word) <= wordCacheMaxWordBytes
	if cacheable {
		if ids, ok := m.words.get(word); ok {
			return append(dst, ids...)
		}
	}
	syms := m.initialSymbols(sc.syms[:0], word)
	sc.syms = syms
	if len(syms) > 1 {
		if len(syms) <= 48 {
			m.mergeLinear(syms)
		} else {
			m.mergeHeap(syms, &sc.heap)
		}
	}
	n := len(dst)
	for i := int32(0); i >= 0 && int(i) < len(syms); i = syms[i].next {
		dst = append(dst, syms[i].id)
	}
	if cacheable {
		// A copy: word may point into a prompt buffer that is reused (splice.go), and a copy
		// keeps a cached word from pinning the whole prompt.
		m.words.put(strings.Clone(word), append([]uint32(nil), dst[n:]...))
	}
	return dst
}

// initialSymbols splits a word into its starting symbols: one per byte for
// byte-level models, one per character (with byte fallback or unk) otherwise.
func (m *bpe) initialSymbols(syms []symbol, word string) []symbol {
	push := func(id uint32) {
		n := int32(len(syms))
		syms = append(syms, symbol{id: id, prev: n - 1, next: n + 1, alive: true})
	}
	if m.byteLevel {
		for i := 0; i < len(word); i++ {
			if id := m.byteIDs[word[i]]; id >= 0 {
				push(uint32(id))
			} else if m.unkID >= 0 {
				push(uint32(m.unkID))
			}
		}
	} else {
		lastUnk := false
		for i := 0; i < len(word); {
			_, size := utf8.DecodeRuneInString(word[i:])
			ch := word[i : i+size]
			i += size
			if id, ok := m.vocab[ch]; ok {
				push(id)
				lastUnk = false
				continue
			}
			if m.byteFallback && m.allFallback(ch) {
				for j := 0; j < len(ch); j++ {
					push(uint32(m.fallbackIDs[ch[j]]))
				}
				lastUnk = false
				continue
			}
			if m.unkID >= 0 {
				if !(m.fuseUnk && lastUnk) {
					push(uint32(m.unkID))
				}
				lastUnk = true
			}
		}
	}
	if n := len(syms); n > 0 {
		syms[n-1].next = -1
	}
	return syms
}

func (m *bpe) allFallback(ch string) bool {
	for j := 0; j < len(ch); j++ {
		if m.fallbackIDs[ch[j]] < 0 {
			return false
		}
	}
	return true
}

// mergeLinear applies merges lowest rank first, leftmost on ties, by scanning
// a cached rank per adjacent pair: the fastest way for short words, and the same
// order as the priority queue.
func (m *bpe) mergeLinear(syms []symbol) {
	const none = ^uint32(0)
	var rankBuf [48]uint32
	var idBuf [48]uint32
	ranks, ids := rankBuf[:len(syms)], idBuf[:len(syms)]
	pair := func(i int32) {
		j := syms[i].next
		if j < 0 {
			ranks[i] = none
			return
		}
		if r, ok := m.merges[pairKey(syms[i].id, syms[j].id)]; ok {
			ranks[i], ids[i] = r.rank, r.id
		} else {
			ranks[i] = none
		}
	}
	for i := range syms {
		pair(int32(i))
	}
	for {
		best, bestPos := none, int32(-1)
		for i := int32(0); i >= 0; i = syms[i].next {
			if ranks[i] < best {
				best, bestPos = ranks[i], i
			}
		}
		if bestPos < 0 {
			return
		}
		j := syms[bestPos].next
		syms[bestPos].id = ids[bestPos]
		syms[bestPos].next = syms[j].next
		syms[j].alive = false
		if nn := syms[j].next; nn >= 0 {
			syms[nn].prev = bestPos
		}
		pair(bestPos)
		if p := syms[bestPos].prev; p >= 0 {
			pair(p)
		}
	}
}

// mergeItem is a candidate merge of the pair starting at pos.
type mergeItem struct {
	rank uint32
	pos  int32
	id   uint32
}

// mergeHeap is a binary min-heap on (rank, pos).
type mergeHeap []mergeItem

func (h mergeHeap) less(a, b int) bool {
	if h[a].rank != h[b].rank {
		return h[a].rank < h[b].rank
	}
	return h[a].pos < h[b].pos
}

func (h *mergeHeap) push(it mergeItem) {
	*h = append(*h, it)
	s := *h
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !s.less(i, p) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *mergeHeap) pop() mergeItem {
	s := *h
	top := s[0]
	n := len(s) - 1
	s[0] = s[n]
	s = s[:n]
	i := 0
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && s.less(l, m) {
			m = l
		}
		if r < n && s.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}

// mergeHeap applies merges in (rank, position) order with a priority queue, as
// Hugging Face does; used for long words where the linear scan is quadratic.
func (m *bpe) mergeHeap(syms []symbol, h *mergeHeap) {
	*h = (*h)[:0]
	for i := 0; i+1 < len(syms); i++ {
		if r, ok := m.merges[pairKey(syms[i].id, syms[i+1].id)]; ok {
			h.push(mergeItem{rank: r.rank, pos: int32(i), id: r.id})
		}
	}
	for len(*h) > 0 {
		top := h.pop()
		s := &syms[top.pos]
		if !s.alive || s.next < 0 {
			continue
		}
		j := s.next
		r, ok := m.merges[pairKey(s.id, syms[j].id)]
		if !ok || r.id != top.id || r.rank != top.rank {
			continue
		}
		s.id = r.id
		s.next = syms[j].next
		syms[j].alive = false
		if nn := syms[j].next; nn >= 0 {
			syms[nn].prev = top.pos
		}
		if p := s.prev; p >= 0 {
			if r2, ok := m.merges[pairKey(syms[p].id, s.id)]; ok {
				h.push(mergeItem{rank: r2.rank, pos: p, id: r2.id})
			}
		}
		if nn := s.next; nn >= 0 {
			if r2, ok := m.merges[pairKey(s.id, syms[nn].id)]; ok {
				h.push(mergeItem{rank: r2.rank, pos: top.pos, id: r2.id})
			}
		}
	}
}

// idBytes returns, for a byte-level model, the raw bytes of every vocabulary id
// (nil for ids not in the model vocabulary). Used to check round trips.
func (m *bpe) idBytes() [][]byte {
	maxID := uint32(0)
	for _, id := range m.vocab {
		maxID = max(maxID, id)
	}
	out := make([][]byte, maxID+1)
	for k, id := range m.vocab {
		out[id] = []byte(k)
	}
	return out
}
