package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/condisagg/condisagg/kvindex"
	"github.com/zeebo/xxh3"
)

// Workload constants shared by every case.
const (
	blockSize     = 16     // tokens per block (vLLM's default)
	numPrefixes   = 16     // distinct shared prefixes (system prompts, documents, conversations)
	chunkBlocks   = 128    // blocks per BlockStored: one 2,048-token prefill chunk per engine step
	vocab         = 151936 // token ids are drawn below this (Qwen3's vocabulary)
	maxPerWorker  = 8192   // prompts per worker at most
	lookupsBlocks = 131072 // blocks per lookup round: 256 prompts of 8k tokens, 64 of 32k
	eventsMagic   = "CDPEVT1\x00"
	lookupsMagic  = "CDPLKP1\x00"
)

// HashMode is how the recorded engines compute their block hashes (the hashes are opaque to
// condisagg, which recomputes its keys from the token ids; Dynamo's indexes rely on them).
type HashMode string

const (
	// HashDynamo: the engine hash of a block is Dynamo's chained sequence hash (XXH3, seed 1337,
	// vllm-kv-events.md §4.5), the same on every worker. Dynamo's positional index matches only
	// such streams, so the grid uses it by default: every peer index can answer correctly.
	HashDynamo HashMode = "dynamo"
	// HashFleet: vLLM with PYTHONHASHSEED set fleet-wide: a digest chain from one seed, equal
	// on every worker but unrelated to the router's keys (what Dynamo's radix trees require).
	HashFleet HashMode = "fleet"
	// HashWorker: vLLM's default without PYTHONHASHSEED: every engine seeds its chain at random.
	HashWorker HashMode = "worker"
)

func parseHashMode(s string) (HashMode, error) {
	switch m := HashMode(s); m {
	case HashDynamo, HashFleet, HashWorker:
		return m, nil
	}
	return "", fmt.Errorf("bench-peers: -engine-hashes %q: want dynamo, fleet or worker", s)
}

// Case is one point of the grid: prompt length, fleet size and the share of each prompt that is
// a prefix other prompts share.
type Case struct {
	Tokens     int // tokens per prompt
	Workers    int
	OverlapPct int // percent of a prompt's blocks that form its shared prefix
	Hashes     HashMode
}

// Name is the case's label and file stem, e.g. "8k/w64/o50".
func (c Case) Name() string {
	return fmt.Sprintf("%dk/w%d/o%d", c.Tokens/1024, c.Workers, c.OverlapPct)
}

func (c Case) stem() string {
	return fmt.Sprintf("L%d_W%d_O%d_%s", c.Tokens, c.Workers, c.OverlapPct, c.Hashes)
}

func (c Case) blocks() int { return c.Tokens / blockSize }
func (c Case) shared() int { return c.blocks() * c.OverlapPct / 100 }

// promptsPerWorker is the number of prompts each worker caches so that the index holds about
// entries (block, worker) pairs: a worker stores each shared prefix once and every suffix.
func (c Case) promptsPerWorker(entries int) int {
	suffix := c.blocks() - c.shared()
	for n := 1; n < maxPerWorker; n++ {
		if c.Workers*(min(n, numPrefixes)*c.shared()+n*suffix) >= entries {
			return n
		}
	}
	return maxPerWorker
}

// Expect is what a correct index answers for the lookup set, computed by the generator alone:
// the oracle both harnesses are checked against.
type Expect struct {
	Case     string `json:"case"`
	Pairs    int64  `json:"pairs"`     // (block, worker) entries stored
	Batches  int64  `json:"batches"`   // recorded KVEventBatch payloads
	Lookups  int    `json:"lookups"`   // prompts in the lookup set
	ScoreSum int64  `json:"score_sum"` // matched blocks summed over lookups and workers
	Hits     int64  `json:"hits"`      // (lookup, worker) pairs with at least one matched block
}

// files are the paths of one generated case.
type files struct{ events, lookups, expect string }

func caseFiles(dir string, c Case) files {
	s := filepath.Join(dir, c.stem())
	return files{events: s + ".events", lookups: s + ".lookups", expect: s + ".expect.json"}
}

// genWorker is the recording state of one engine: the seed of its hash chain (see HashMode) and
// the prefixes it has cached.
type genWorker struct {
	rng      *rand.Rand
	noneHash uint64
	cached   uint32   // bit p: prefix p is in this worker's cache
	left     int      // prompts still to record
	tokens   []uint32 // the prompt being recorded
	ehs      []uint64 // its engine hashes
	next     int      // its first block not yet announced
	prefix   int      // its shared prefix
}

// generate writes the case's recorded event batches, lookup set and expectations under dir.
func generate(dir string, c Case, entries int, seed uint64) (Expect, error) {
	f := caseFiles(dir, c)
	rng := rand.New(rand.NewPCG(seed, uint64(c.Tokens)<<32|uint64(c.Workers)<<8|uint64(c.OverlapPct)))
	prefixes := make([][]uint32, numPrefixes)
	for p := range prefixes {
		prefixes[p] = randomTokens(rng, nil, c.shared()*blockSize)
	}
	ex := Expect{Case: c.Name()}
	holders, err := writeEvents(f.events, c, entries, rng, prefixes, &ex)
	if err != nil {
		return ex, err
	}
	if err := writeLookups(f.lookups, c, rng, prefixes, holders, &ex); err != nil {
		return ex, err
	}
	b, _ := json.Marshal(ex)
	if err := os.WriteFile(f.expect, b, 0o644); err != nil {
		return ex, fmt.Errorf("bench-peers: write %s: %w", f.expect, err)
	}
	return ex, nil
}

// writeEvents records every worker's BlockStored batches, interleaved round-robin as a router
// receives them from a fleet, and returns per prefix the number of workers that cache it.
func writeEvents(path string, c Case, entries int, rng *rand.Rand, prefixes [][]uint32, ex *Expect) ([numPrefixes]int, error) {
	var holders [numPrefixes]int
	ws := make([]genWorker, c.Workers)
	ppw := c.promptsPerWorker(entries)
	fleetSeed := rng.Uint64()
	for w := range ws {
		ws[w] = genWorker{rng: rand.New(rand.NewPCG(rng.Uint64(), uint64(w))), noneHash: fleetSeed, left: ppw}
		if c.Hashes == HashWorker {
			ws[w].noneHash = rng.Uint64()
		}
	}
	out, err := os.Create(path)
	if err != nil {
		return holders, fmt.Errorf("bench-peers: create %s: %w", path, err)
	}
	defer out.Close()
	bw := bufio.NewWriterSize(out, 1<<20)
	hdr := make([]byte, 0, 32)
	hdr = append(hdr, eventsMagic...)
	hdr = binary.LittleEndian.AppendUint32(hdr, uint32(c.Workers))
	hdr = binary.LittleEndian.AppendUint32(hdr, blockSize)
	hdr = append(hdr, make([]byte, 16)...) // pairs and batches, patched below
	bw.Write(hdr)
	var payload []byte
	var evs [1]storedEvent
	for active := c.Workers; active > 0; {
		active = 0
		for w := range ws {
			ev, ok := ws[w].nextEvent(c, prefixes)
			if !ok {
				continue
			}
			active++
			evs[0] = ev
			payload = appendBatch(payload[:0], float64(ex.Batches), blockSize, evs[:])
			var rec [8]byte
			binary.LittleEndian.PutUint32(rec[:4], uint32(w))
			binary.LittleEndian.PutUint32(rec[4:], uint32(len(payload)))
			bw.Write(rec[:])
			bw.Write(payload)
			ex.Batches++
			ex.Pairs += int64(len(ev.hashes))
		}
	}
	for w := range ws {
		for p := range numPrefixes {
			if c.shared() > 0 && ws[w].cached&(1<<p) != 0 {
				holders[p]++
			}
		}
	}
	if err := bw.Flush(); err != nil {
		return holders, fmt.Errorf("bench-peers: write %s: %w", path, err)
	}
	binary.LittleEndian.PutUint64(hdr[16:], uint64(ex.Pairs))
	binary.LittleEndian.PutUint64(hdr[24:], uint64(ex.Batches))
	if _, err := out.WriteAt(hdr[16:32], 16); err != nil {
		return holders, fmt.Errorf("bench-peers: write %s header: %w", path, err)
	}
	return holders, out.Close()
}

// nextEvent returns the worker's next BlockStored (one prefill chunk), starting a new prompt when
// the last one is fully announced; false when the worker has recorded all its prompts. As in
// vLLM, blocks already cached (a shared prefix this worker stored before) are not announced
// again: the first event of such a prompt chains after the prefix's last block.
func (g *genWorker) nextEvent(c Case, prefixes [][]uint32) (storedEvent, bool) {
	nb := c.blocks()
	if g.tokens == nil || g.next >= nb {
		if g.left == 0 {
			return storedEvent{}, false
		}
		g.left--
		g.startPrompt(c, prefixes)
	}
	from, to := g.next, min(g.next+chunkBlocks, nb)
	if sh := c.shared(); from < sh {
		to = min(to, sh) // a chunk ends at the prefix end, as a prefix-cache hit would
	}
	ev := storedEvent{hashes: g.ehs[from:to], tokens: g.tokens[from*blockSize : to*blockSize]}
	if from > 0 {
		ev.hasParent, ev.parent = true, g.ehs[from-1]
	}
	g.next = to
	if to == c.shared() {
		g.cached |= 1 << g.prefix
	}
	return ev, true
}

// startPrompt draws the worker's next prompt: a random shared prefix, then fresh tokens.
func (g *genWorker) startPrompt(c Case, prefixes [][]uint32) {
	g.prefix = g.rng.IntN(numPrefixes)
	g.tokens = append(g.tokens[:0], prefixes[g.prefix]...)
	g.tokens = randomTokens(g.rng, g.tokens, (c.blocks()-c.shared())*blockSize)
	g.ehs = g.ehs[:0]
	if c.Hashes == HashDynamo {
		g.ehs = kvindex.AppendKeys(g.ehs, 0, g.tokens, blockSize, nil)
	} else {
		parent := g.noneHash
		for b := range c.blocks() {
			parent = engineHash(parent, g.tokens[b*blockSize:(b+1)*blockSize])
			g.ehs = append(g.ehs, parent)
		}
	}
	g.next = 0
	if c.shared() > 0 && g.cached&(1<<g.prefix) != 0 {
		g.next = c.shared()
	}
}

// engineHash stands in for vLLM's block hash: a digest of the parent's hash and the block's
// tokens (any collision-free function will do; routers treat it as opaque).
func engineHash(parent uint64, block []uint32) uint64 {
	var buf [8 + 4*blockSize]byte
	binary.LittleEndian.PutUint64(buf[:8], parent)
	for i, t := range block {
		binary.LittleEndian.PutUint32(buf[8+4*i:], t)
	}
	if h := xxh3.HashSeed(buf[:8+4*len(block)], 0x5eed); h != 0 {
		return h
	}
	return 1
}

func randomTokens(r *rand.Rand, dst []uint32, n int) []uint32 {
	for range n {
		dst = append(dst, r.Uint32N(vocab))
	}
	return dst
}

// writeLookups writes the lookup set: unique prompts, each a random shared prefix followed by
// fresh tokens, so a prompt matches exactly the shared prefix on every worker that caches it
// (nothing at 0% overlap). It fills the expectations from holders.
func writeLookups(path string, c Case, rng *rand.Rand, prefixes [][]uint32, holders [numPrefixes]int, ex *Expect) error {
	out, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("bench-peers: create %s: %w", path, err)
	}
	defer out.Close()
	bw := bufio.NewWriterSize(out, 1<<20)
	n := max(1, lookupsBlocks/c.blocks())
	hdr := append([]byte(lookupsMagic), 0, 0, 0, 0, 0, 0, 0, 0)
	binary.LittleEndian.PutUint32(hdr[8:], blockSize)
	binary.LittleEndian.PutUint32(hdr[12:], uint32(n))
	bw.Write(hdr)
	var tokens []uint32
	buf := make([]byte, 0, 4*c.Tokens+4)
	for range n {
		p := rng.IntN(numPrefixes)
		tokens = append(tokens[:0], prefixes[p]...)
		tokens = randomTokens(rng, tokens, c.Tokens-len(tokens))
		buf = binary.LittleEndian.AppendUint32(buf[:0], uint32(len(tokens)))
		for _, t := range tokens {
			buf = binary.LittleEndian.AppendUint32(buf, t)
		}
		bw.Write(buf)
		ex.ScoreSum += int64(holders[p] * c.shared())
		ex.Hits += int64(holders[p])
	}
	ex.Lookups = n
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("bench-peers: write %s: %w", path, err)
	}
	return out.Close()
}
