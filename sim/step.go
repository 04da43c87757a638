package sim

import (
	"encoding/binary"
	"time"

	"github.com/condisagg/condisagg/internal/splitmix"
	"github.com/zeebo/xxh3"
)

// EventKind is the kind of a KV cache event (vllm-kv-events.md §3).
type EventKind uint8

const (
	EventBlockStored EventKind = iota + 1
	EventBlockRemoved
	EventAllBlocksCleared
)

// Event is one KV cache event as the engine produces it. Slices are valid until the next Step
// (or TakeEvents) and must not be modified.
type Event struct {
	Kind      EventKind
	Hashes    []uint64 // engine block hashes: the newly cached blocks, or the one evicted block
	Parent    uint64   // BlockStored: hash of the block before Hashes[0], valid when HasParent
	HasParent bool     // false iff Hashes[0] is block 0 of its sequence
	Tokens    []uint32 // BlockStored: the tokens of the stored blocks
	LoRA      Adapter  // BlockStored: the adapter of the request that stored them (zero: base)
}

// Token is one output token produced by a step.
type Token struct {
	ID    RequestID
	Token uint32
	Index int // 0 for the first token
}

// Finished reports a request that ended in a step.
type Finished struct {
	ID           RequestID
	Reason       FinishReason
	PromptTokens int
	CachedTokens int // prefix-cache hit at first admission (plus transferred KV for RemotePrefill)
	OutputTokens int
	BlockIDs     []int32 // PrefillOnly: the request's KV block ids (NixlConnector remote_block_ids)
}

// StepResult is what one Step did. It is reused by the next Step.
type StepResult struct {
	Duration  time.Duration // from CostModel.StepTime; 0 when nothing was scheduled
	Shape     StepShape
	Tokens    []Token
	Finished  []Finished
	Events    []Event
	Preempted int // requests preempted (recompute) in this step
}

// Step runs one scheduler step at time now: it completes the KV transfers due by now, schedules
// running requests first (each decode takes one token of budget, a partial prefill its next
// chunk), then waiting ones FCFS while the token budget, sequence slots and free blocks allow,
// and applies the step's outcome (computed tokens, newly cached blocks, sampled tokens, finished
// requests). The caller delivers the outcome after res.Duration and calls Step again at
// now+Duration. A step that schedules nothing returns Duration 0 (its Events may still hold
// cache events, e.g. from a transfer that completed).
func (e *Engine) Step(now time.Duration) *StepResult {
	res := &e.res
	res.Duration, res.Shape, res.Preempted = 0, StepShape{}, 0
	res.Tokens, res.Finished = res.Tokens[:0], res.Finished[:0]
	res.Events = append(res.Events[:0], e.events...)
	e.events = e.events[:0]
	e.hashArea = e.hashArea[:0]
	e.sched = e.sched[:0]

	e.completeTransfers(now)
	budget := e.scheduleRunning(e.cfg.MaxNumBatchedTokens)
	if res.Preempted == 0 {
		e.scheduleWaiting(now, budget)
	}
	for _, s := range e.sched {
		e.account(s)
	}
	res.Duration = e.cfg.Model.StepTime(res.Shape)
	if len(e.sched) > 0 {
		e.stats.Steps++
	}
	for _, s := range e.sched {
		e.commit(s)
	}
	e.running = compactRunning(e.running)
	return res
}

func compactRunning(q []*request) []*request {
	k := 0
	for _, r := range q {
		if r.state == stRunning {
			q[k] = r
			k++
		}
	}
	clear(q[k:])
	return q[:k]
}

// scheduleRunning gives each running request its next chunk or decode token, preempting the
// most recently admitted requests when blocks run out. It returns the budget left.
func (e *Engine) scheduleRunning(budget int) int {
	for i := 0; i < len(e.running) && budget > 0; i++ {
		r := e.running[i]
		n := min(len(r.tokens)-r.computed, budget)
		for !e.grow(r, r.computed+n) {
			victim := e.running[len(e.running)-1]
			e.running = e.running[:len(e.running)-1]
			e.preempt(victim)
			if victim == r {
				return budget
			}
		}
		e.sched = append(e.sched, scheduled{r, n})
		budget -= n
	}
	return budget
}

// scheduleWaiting admits waiting requests FCFS; a RemotePrefill request starts its transfer
// instead of computing.
func (e *Engine) scheduleWaiting(now time.Duration, budget int) {
	for len(e.waiting) > 0 && budget > 0 && len(e.running) < e.cfg.MaxNumSeqs {
		r := e.waiting[0]
		fresh := len(r.blocks) == 0
		var hit []int32
		if fresh {
			hit = e.prefixHit(r)
		}
		start := r.computed
		if fresh {
			start = len(hit) * e.cfg.BlockSize
		}
		n := min(len(r.tokens)-start, budget)
		if r.remote {
			n = len(r.tokens) - start // the transfer fills every remaining prompt slot
		}
		if !e.admit(r, hit, start+n) {
			return
		}
		if !r.admitted {
			r.admitted = true
			r.cachedTok = start
			e.stats.PrefixQueries += uint64(len(r.tokens))
			e.stats.PrefixHits += uint64(start)
		}
		r.computed = start
		e.waiting[0] = nil
		e.waiting = e.waiting[1:]
		if r.remote {
			r.state = stTransferring
			r.xferTokens, r.xferTime = n, e.cfg.Model.TransferTime(n)
			r.readyAt = now + r.xferTime
			e.xfer = append(e.xfer, r)
			continue
		}
		r.state = stRunning
		e.running = append(e.running, r)
		e.sched = append(e.sched, scheduled{r, n})
		budget -= n
	}
}

// prefixHit returns the cached blocks of r's leading full blocks, capped so that at least the
// last token is computed (a hit never exceeds L-1 tokens).
func (e *Engine) prefixHit(r *request) []int32 {
	limit := (len(r.tokens) - 1) / e.cfg.BlockSize
	e.hashBlocks(r, limit)
	hit := r.blocks[:0]
	for j := range limit {
		b, ok := e.pool.lookup(r.hashes[j])
		if !ok {
			break
		}
		hit = append(hit, b)
	}
	return hit
}

// admit takes the hit blocks and allocates blocks up to tokens; it changes nothing and returns
// false when the free blocks do not suffice.
func (e *Engine) admit(r *request, hit []int32, tokens int) bool {
	if len(hit) > 0 {
		need := e.blocksFor(tokens) - len(hit)
		freeHits := 0
		for _, b := range hit {
			if e.pool.ref[b] == 0 {
				freeHits++
			}
		}
		if need > e.pool.numFree-freeHits {
			r.blocks = r.blocks[:0]
			return false
		}
		for _, b := range hit {
			e.pool.touch(b)
		}
		r.blocks = hit
		r.numCached = len(hit)
	}
	return e.grow(r, tokens)
}

// grow allocates blocks so that r can hold tokens tokens, evicting free cached blocks as
// needed; it allocates nothing and returns false when too few blocks are free.
func (e *Engine) grow(r *request, tokens int) bool {
	need := e.blocksFor(tokens) - len(r.blocks)
	if need <= 0 {
		return true
	}
	if need > e.pool.numFree {
		return false
	}
	for range need {
		b, h, evicted := e.pool.alloc()
		if evicted && e.cfg.Events {
			e.hashArea = append(e.hashArea, h)
			e.res.Events = append(e.res.Events, Event{Kind: EventBlockRemoved, Hashes: e.hashArea[len(e.hashArea)-1:]})
		}
		r.blocks = append(r.blocks, b)
	}
	return true
}

// preempt frees r's blocks (they stay cached) and puts it back at the head of the waiting queue
// to be recomputed (prompt and output so far).
func (e *Engine) preempt(r *request) {
	e.freeBlocks(r)
	r.computed = 0
	r.state = stWaiting
	e.waiting = append(e.waiting, nil)
	copy(e.waiting[1:], e.waiting)
	e.waiting[0] = r
	e.res.Preempted++
	e.stats.Preemptions++
}

// completeTransfers moves requests whose KV arrived by now back to the head of the waiting
// queue with every prompt token but the last computed, and caches the received full blocks.
// Such a request reports the whole prompt cached, as vLLM 0.32 does (its local hit plus the
// tokens the connector loaded). A failed transfer (Request.TransferFails) goes back with only
// its local hit computed, which is all it reports, or ends with FinishError under
// Request.FailOnTransferError.
func (e *Engine) completeTransfers(now time.Duration) {
	k := 0
	var ready []*request
	for _, r := range e.xfer {
		if r.readyAt <= now {
			ready = append(ready, r)
			continue
		}
		e.xfer[k] = r
		k++
	}
	clear(e.xfer[k:])
	e.xfer = e.xfer[:k]
	for i := len(ready) - 1; i >= 0; i-- {
		r := ready[i]
		r.remote = false
		switch {
		case r.xferFail && r.xferFailHard:
			r.stop = FinishError
			e.finish(r)
			continue
		case r.xferFail:
			// vLLM truncates num_computed_tokens at the first invalid block: the local hit.
			r.computed = r.cachedTok
		default:
			r.computed = len(r.tokens) - 1
			r.cachedTok = r.promptLen
			e.cacheFull(r)
			e.stats.KVTransfers++
			e.stats.KVTransferTime += r.xferTime
			e.stats.KVTransferBytes += float64(r.xferTokens) * e.cfg.Model.BytesPerToken
		}
		r.state = stWaiting
		e.waiting = append(e.waiting, nil)
		copy(e.waiting[1:], e.waiting)
		e.waiting[0] = r
	}
}

// account adds one scheduled chunk to the step's shape.
func (e *Engine) account(s scheduled) {
	sh := &e.res.Shape
	if s.n == 1 && s.r.numOut > 0 {
		sh.DecodeSeqs++
		sh.DecodeContexts += s.r.computed + 1
		return
	}
	sh.PrefillTokens += s.n
	sh.PrefillPairs += float64(s.n) * (float64(s.r.computed) + float64(s.n)/2)
}

// commit applies a scheduled chunk: computed tokens, newly full blocks into the cache, and a
// sampled token when the request caught up with its tokens.
func (e *Engine) commit(s scheduled) {
	r := s.r
	if s.n > 1 || r.numOut == 0 {
		e.stats.PromptTokens += uint64(s.n)
	}
	r.computed += s.n
	e.cacheFull(r)
	if r.computed < len(r.tokens) {
		return
	}
	tok := r.out(r.numOut)
	r.tokens = append(r.tokens, tok)
	e.res.Tokens = append(e.res.Tokens, Token{ID: r.id, Token: tok, Index: r.numOut})
	r.numOut++
	e.stats.GenerationTokens++
	if r.numOut >= r.maxTokens {
		e.finish(r)
	}
}

func (e *Engine) finish(r *request) {
	f := Finished{ID: r.id, Reason: r.stop, PromptTokens: r.promptLen, CachedTokens: r.cachedTok, OutputTokens: r.numOut}
	if r.prefill {
		f.Reason = FinishLength
		f.BlockIDs = append([]int32(nil), r.blocks...)
	}
	e.res.Finished = append(e.res.Finished, f)
	e.freeBlocks(r)
	r.state = stDone
	delete(e.reqs, r.id)
}

// cacheFull caches r's blocks that are full of computed tokens and not cached yet, and records
// one BlockStored for them.
func (e *Engine) cacheFull(r *request) {
	full := r.computed / e.cfg.BlockSize
	if full <= r.numCached {
		return
	}
	e.hashBlocks(r, full)
	for j := r.numCached; j < full; j++ {
		e.pool.cache(r.blocks[j], r.hashes[j])
	}
	if e.cfg.Events {
		ev := Event{Kind: EventBlockStored, Hashes: r.hashes[r.numCached:full:full],
			Tokens: r.tokens[r.numCached*e.cfg.BlockSize : full*e.cfg.BlockSize : full*e.cfg.BlockSize], LoRA: r.lora}
		if r.numCached > 0 {
			ev.Parent, ev.HasParent = r.hashes[r.numCached-1], true
		}
		e.res.Events = append(e.res.Events, ev)
	}
	r.numCached = full
}

// hashBlocks extends r.hashes to the first n full blocks: XXH3-64 of the parent hash and the
// block's tokens (little-endian), seeded with Config.Seed; block 0's parent is a seed-derived
// constant. An adapter's key (name and path, as in vLLM's extra keys) is mixed into the
// parent of every block.
func (e *Engine) hashBlocks(r *request, n int) {
	bs := e.cfg.BlockSize
	for j := len(r.hashes); j < n; j++ {
		parent := splitmix.Mix64(e.cfg.Seed)
		if j > 0 {
			parent = r.hashes[j-1]
		}
		r.hashes = append(r.hashes, e.blockHash(parent^r.loraKey, r.tokens[j*bs:(j+1)*bs]))
	}
}

// loraKey is an adapter's contribution to its blocks' hashes (never 0).
func loraKey(a Adapter) uint64 {
	return xxh3.HashString(a.Name+"\x00"+a.Path) | 1
}

func (e *Engine) blockHash(parent uint64, tokens []uint32) uint64 {
	buf := e.hbuf[:]
	binary.LittleEndian.PutUint64(buf, parent)
	if 8+4*len(tokens) <= len(buf) {
		for i, t := range tokens {
			binary.LittleEndian.PutUint32(buf[8+4*i:], t)
		}
		return xxh3.HashSeed(buf[:8+4*len(tokens)], e.cfg.Seed)
	}
	h := xxh3.NewSeed(e.cfg.Seed)
	_, _ = h.Write(buf[:8])
	for _, t := range tokens {
		binary.LittleEndian.PutUint32(buf[:4], t)
		_, _ = h.Write(buf[:4])
	}
	return h.Sum64()
}
