package pool

import (
	"sort"

	"github.com/condisagg/condisagg/policy"
)

// Request is what a policy.Snapshot needs of the request being decided.
type Request struct {
	// Keys are the router's chained block keys of the prompt's full blocks, from block 0.
	Keys []uint64
	// ISL is the prompt length in tokens; a partial tail block (ISL mod block size != 0) is one
	// more unique block.
	ISL int
}

// Snapshot fills dst (reusing its slices) with every eligible worker's load as seen by r.
func (p *Pool) Snapshot(dst *policy.Snapshot, r Request) {
	partial := int64(0)
	if r.ISL > 0 && r.ISL%p.cfg.BlockSize != 0 {
		partial = 1
	}
	fresh := p.scrapeFreshAfter()
	p.mu.RLock()
	defer p.mu.RUnlock()
	dst.Version = p.version
	dst.Decode = dst.Decode[:0]
	for _, w := range p.decode {
		if p.healthyLocked(w) {
			l := p.loadLocked(w, fresh)
			l.NewBlocks = int64(len(r.Keys)-activePrefix(&w.active, r.Keys)) + partial
			dst.Decode = append(dst.Decode, l)
		}
	}
	dst.Prefill = dst.Prefill[:0]
	for _, w := range p.prefill {
		if p.healthyLocked(w) {
			l := p.loadLocked(w, fresh)
			l.NewBlocks = int64(len(r.Keys)-activePrefix(&w.active, r.Keys)) + partial
			dst.Prefill = append(dst.Prefill, l)
		}
	}
}

func (p *Pool) loadLocked(w *worker, freshAfter int64) policy.WorkerLoad {
	reqs := w.requests
	fresh := freshAfter != 0 && w.scrape.At.UnixNano() >= freshAfter
	if fresh && w.scrape.HasRequests {
		reqs = max(reqs, int64(w.scrape.Running+w.scrape.Waiting))
	}
	return policy.WorkerLoad{ID: w.id, Endpoint: w.endpoint, DPRank: w.rank, DPSize: w.dpSize, MaxBatchedTokens: w.mnbt(), KVCapacityBlocks: w.kvCap(),
		ActivePrefillTokens: w.apt, ActiveDecodeBlocks: w.decodeBlocks(), ActiveRequests: reqs, DecodeRequests: w.decoding,
		ReportedKVUsage: reportedUsage(w, fresh), NoNIXL: w.kind != EngineVLLM}
}

// reportedUsage is w's KV usage fraction from a fresh scrape, else -1 (unknown).
func reportedUsage(w *worker, fresh bool) float64 {
	if !fresh || w.scrape.KVUsage < 0 {
		return -1
	}
	return w.scrape.KVUsage
}

// scrapeFreshAfter is the UnixNano before which a scrape is too old to correct the request
// count (three scrape intervals), or 0 when scraping is off.
func (p *Pool) scrapeFreshAfter() int64 {
	if p.cfg.ScrapeInterval <= 0 {
		return 0
	}
	return p.clock.Now().Add(-3 * p.cfg.ScrapeInterval).UnixNano()
}

// activePrefix is the number of leading keys present in active. Chained keys make the active
// set prefix-closed (a booked key implies its whole prefix is booked, because a request books
// keys 0..n-1 and releases them together), so presence along keys is monotone and a binary
// search finds the boundary in O(log n) lookups.
func activePrefix(active *keyCounts, keys []uint64) int {
	if active.len() == 0 {
		return 0
	}
	return sort.Search(len(keys), func(i int) bool { return active.get(keys[i]) == 0 })
}
