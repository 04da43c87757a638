package sim

import (
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

func testModel(t testing.TB) CostModel {
	t.Helper()
	m, err := PerfModel("llama3.1-8b-h100")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func newEngine(t testing.TB, cfg Config) *Engine {
	t.Helper()
	if cfg.Model.Name == "" {
		cfg.Model = testModel(t)
	}
	cfg.Events = true
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func seqTokens(n int, base uint32) []uint32 {
	p := make([]uint32, n)
	for i := range p {
		p[i] = base + uint32(i)
	}
	return p
}

func mustAdd(t testing.TB, e *Engine, r Request) RequestID {
	t.Helper()
	id, err := e.Add(r)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// trace records everything the engine reports, step by step.
type trace struct {
	now      time.Duration
	steps    []StepShape
	durs     []time.Duration
	tokens   map[RequestID][]uint32
	firstAt  map[RequestID]int // step index of the first token
	finished map[RequestID]Finished
	stored   [][]uint64
	removed  []uint64
	cleared  int
}

func newTrace() *trace {
	return &trace{tokens: map[RequestID][]uint32{}, firstAt: map[RequestID]int{}, finished: map[RequestID]Finished{}}
}

func (tr *trace) record(res *StepResult) {
	tr.steps = append(tr.steps, res.Shape)
	tr.durs = append(tr.durs, res.Duration)
	for _, tk := range res.Tokens {
		if tk.Index == 0 {
			tr.firstAt[tk.ID] = len(tr.steps) - 1
		}
		tr.tokens[tk.ID] = append(tr.tokens[tk.ID], tk.Token)
	}
	for _, f := range res.Finished {
		f.BlockIDs = append([]int32(nil), f.BlockIDs...)
		tr.finished[f.ID] = f
	}
	for _, ev := range res.Events {
		switch ev.Kind {
		case EventBlockStored:
			tr.stored = append(tr.stored, append([]uint64(nil), ev.Hashes...))
		case EventBlockRemoved:
			tr.removed = append(tr.removed, ev.Hashes...)
		case EventAllBlocksCleared:
			tr.cleared++
		}
	}
}

// drain steps e until it is idle (jumping over transfers), at most maxSteps steps.
func drain(t testing.TB, e *Engine, tr *trace, maxSteps int) {
	t.Helper()
	for i := 0; !e.Idle(); i++ {
		if i == maxSteps {
			t.Fatalf("engine not idle after %d steps: %+v", maxSteps, e.Stats())
		}
		res := e.Step(tr.now)
		tr.record(res)
		if res.Duration == 0 {
			next, ok := e.NextTransfer()
			if !ok {
				t.Fatalf("step %d scheduled nothing and no transfer is in flight: %+v", i, e.Stats())
			}
			tr.now = next
			continue
		}
		tr.now += res.Duration
	}
}

// msDuration is a step time in milliseconds as a duration, rounded as package cost rounds.
func msDuration(ms float64) time.Duration { return time.Duration(math.Round(ms * 1e6)) }

func TestEngineStepDurationMatchesFormula(t *testing.T) {
	e := newEngine(t, Config{NumGPUBlocks: 1000})
	mustAdd(t, e, Request{Prompt: seqTokens(1024, 100), MaxTokens: 3})
	res := e.Step(0)
	want := msDuration(6.5 + 0.021*1024 + 1e-6*1024*512)
	if res.Duration != want || len(res.Tokens) != 1 {
		t.Fatalf("prefill step = %v with %d tokens, want %v and the first token", res.Duration, len(res.Tokens), want)
	}
	res = e.Step(res.Duration)
	want = msDuration(6.5 + 0.03 + 4.9e-5*1025)
	if res.Duration != want || res.Shape.DecodeSeqs != 1 || res.Shape.DecodeContexts != 1025 {
		t.Fatalf("decode step = %v %+v, want %v, B=1, C=1025", res.Duration, res.Shape, want)
	}
}

func TestChunkedPrefillBudget(t *testing.T) {
	e := newEngine(t, Config{NumGPUBlocks: 1000, MaxNumBatchedTokens: 512})
	a := mustAdd(t, e, Request{Prompt: seqTokens(1200, 100), MaxTokens: 2})
	b := mustAdd(t, e, Request{Prompt: seqTokens(100, 5000), MaxTokens: 2})
	tr := newTrace()
	drain(t, e, tr, 100)
	want := []StepShape{
		{PrefillTokens: 512, PrefillPairs: 512 * 256},
		{PrefillTokens: 512, PrefillPairs: 512 * (512 + 256)},
		// a's last 176 tokens and b's first 336... b has only 100 tokens: both fit.
		{PrefillTokens: 176 + 100, PrefillPairs: 176*(1024+88) + 100*50},
		{DecodeSeqs: 2, DecodeContexts: 1201 + 101},
	}
	if !reflect.DeepEqual(tr.steps, want) {
		t.Fatalf("perf-model.md §3 token budget: shapes\n got %+v\nwant %+v", tr.steps, want)
	}
	if tr.firstAt[a] != 2 || tr.firstAt[b] != 2 {
		t.Fatalf("first tokens at steps a=%d b=%d, want 2 and 2 (end of the step completing the prompt)", tr.firstAt[a], tr.firstAt[b])
	}
}

func TestMaxNumSeqs(t *testing.T) {
	e := newEngine(t, Config{NumGPUBlocks: 1000, MaxNumSeqs: 2})
	for i := range 3 {
		mustAdd(t, e, Request{Prompt: seqTokens(10, uint32(1000*i)), MaxTokens: 5})
	}
	res := e.Step(0)
	if res.Shape.PrefillTokens != 20 || e.Stats().Waiting != 1 {
		t.Fatalf("max_num_seqs 2: prefill %d tokens, %d waiting; want 20 and 1", res.Shape.PrefillTokens, e.Stats().Waiting)
	}
}

func TestPrefixCache(t *testing.T) {
	const bs = 16
	e := newEngine(t, Config{NumGPUBlocks: 1000})
	tr := newTrace()
	prompt := seqTokens(4*bs+5, 100) // 4 full blocks and a partial one
	a := mustAdd(t, e, Request{Prompt: prompt, MaxTokens: 12})
	drain(t, e, tr, 100)
	// Prompt blocks 0-3 are stored after prefill, then block 4 once decode fills it (5+11 = 16
	// computed tokens; the 12th output token is sampled but never computed).
	if got := tr.stored; len(got) != 2 || len(got[0]) != 4 || len(got[1]) != 1 {
		t.Fatalf("vllm-kv-events.md §3.1: stores %v, want 4 prompt blocks then 1 generated block", got)
	}
	if tr.finished[a].CachedTokens != 0 {
		t.Fatalf("cold request cached %d tokens", tr.finished[a].CachedTokens)
	}

	// Turn 2: prompt + the output + more text hits the 5 cached blocks.
	turn2 := append(append([]uint32(nil), prompt...), tr.tokens[a]...)
	turn2 = append(turn2, seqTokens(20, 9000)...)
	tr2 := newTrace()
	b := mustAdd(t, e, Request{Prompt: turn2, MaxTokens: 1})
	drain(t, e, tr2, 100)
	if got := tr2.finished[b].CachedTokens; got != 5*bs {
		t.Fatalf("perf-model.md §3 prefix cache: turn 2 cached %d tokens, want %d", got, 5*bs)
	}
	if len(tr2.stored) != 1 || tr2.stored[0][0] == tr.stored[1][0] {
		t.Fatalf("hits are not re-announced: stores %v", tr2.stored)
	}

	// A block-aligned, fully cached prompt recomputes its last block (hit capped at L-1) and
	// stores that hash a second time.
	tr3 := newTrace()
	c := mustAdd(t, e, Request{Prompt: prompt[:4*bs], MaxTokens: 1})
	drain(t, e, tr3, 100)
	if got := tr3.finished[c].CachedTokens; got != 3*bs {
		t.Fatalf("vllm-kv-events.md §4.4 L-1 cap: cached %d tokens, want %d", got, 3*bs)
	}
	if len(tr3.stored) != 1 || !reflect.DeepEqual(tr3.stored[0], tr.stored[0][3:4]) {
		t.Fatalf("§3.6 duplicate store: got %v, want block 3's hash %v again", tr3.stored, tr.stored[0][3:4])
	}
	st := e.Stats()
	if want := uint64(len(prompt) + len(turn2) + 4*bs); st.PrefixQueries != want {
		t.Fatalf("prefix queries = %d tokens, want %d", st.PrefixQueries, want)
	}
	if want := uint64(5*bs + 3*bs); st.PrefixHits != want {
		t.Fatalf("prefix hits = %d tokens, want %d", st.PrefixHits, want)
	}
}

func TestEvictionLRUAndInUse(t *testing.T) {
	const bs = 16
	// 8 blocks: A (2 blocks) and B (2 blocks) finish and stay cached; C is running with 3
	// blocks; D needs 3 blocks: 1 free uncached plus the 2 least recently freed cached ones.
	e := newEngine(t, Config{NumGPUBlocks: 8})
	tr := newTrace()
	a := mustAdd(t, e, Request{Prompt: seqTokens(2*bs, 100), MaxTokens: 1})
	drain(t, e, tr, 10)
	b := mustAdd(t, e, Request{Prompt: seqTokens(2*bs, 200), MaxTokens: 1})
	drain(t, e, tr, 10)
	_, _ = a, b
	storedA, storedB := tr.stored[0], tr.stored[1]
	c := mustAdd(t, e, Request{Prompt: seqTokens(2*bs+1, 300), MaxTokens: 10})
	res := e.Step(tr.now)
	tr.record(res)
	if len(tr.removed) != 0 {
		t.Fatalf("C took blocks %v while 4 never-used blocks were free", tr.removed)
	}
	d := mustAdd(t, e, Request{Prompt: seqTokens(2*bs+1, 400), MaxTokens: 10})
	res = e.Step(tr.now)
	tr.record(res)
	// Blocks are freed in reverse order, so A's last block is evicted before its first.
	want := []uint64{storedA[1], storedA[0]}
	if !reflect.DeepEqual(tr.removed, want) {
		t.Fatalf("perf-model.md §3 LRU eviction: removed %v, want A's blocks %v (B's %v stay)", tr.removed, want, storedB)
	}
	// Now every block is in use or holds B: E cannot be admitted without evicting in-use blocks.
	e2 := mustAdd(t, e, Request{Prompt: seqTokens(5*bs, 500), MaxTokens: 1})
	res = e.Step(tr.now)
	tr.record(res)
	if e.Stats().Waiting != 1 {
		t.Fatalf("E admitted with %d free blocks", e.pool.numFree)
	}
	for _, h := range tr.removed[2:] {
		for _, blk := range e.running {
			for _, hb := range blk.hashes[:blk.numCached] {
				if hb == h {
					t.Fatalf("vllm-kv-events.md §3.2: evicted hash %x held by running request %d", h, blk.id)
				}
			}
		}
	}
	drain(t, e, tr, 100)
	for _, id := range []RequestID{c, d, e2} {
		if _, ok := tr.finished[id]; !ok {
			t.Fatalf("request %d never finished", id)
		}
	}
}

func TestPreemptionRecompute(t *testing.T) {
	// Two requests whose decodes outgrow 6 blocks: the most recently admitted one is preempted,
	// recomputed after the other finishes, and still produces every token.
	e := newEngine(t, Config{NumGPUBlocks: 6})
	tr := newTrace()
	a := mustAdd(t, e, Request{Prompt: seqTokens(30, 100), MaxTokens: 40})
	b := mustAdd(t, e, Request{Prompt: seqTokens(30, 900), MaxTokens: 40})
	drain(t, e, tr, 1000)
	if e.Stats().Preemptions == 0 {
		t.Fatal("perf-model.md §3 preemption: no request was preempted")
	}
	for _, id := range []RequestID{a, b} {
		if n := len(tr.tokens[id]); n != 40 {
			t.Fatalf("request %d produced %d tokens, want 40", id, n)
		}
	}
	if tr.finished[a].OutputTokens != 40 {
		t.Fatalf("a finished with %+v", tr.finished[a])
	}
}

func TestAddRejects(t *testing.T) {
	e := newEngine(t, Config{NumGPUBlocks: 4})
	if _, err := e.Add(Request{MaxTokens: 1}); !errors.Is(err, ErrEmptyPrompt) {
		t.Fatalf("empty prompt: %v", err)
	}
	if _, err := e.Add(Request{Prompt: seqTokens(60, 1), MaxTokens: 10}); !errors.Is(err, ErrTooLong) {
		t.Fatalf("70 tokens in 64 slots: %v", err)
	}
	if err := e.Abort(99); !errors.Is(err, ErrUnknownRequest) {
		t.Fatalf("abort unknown: %v", err)
	}
}

func TestAbortFreesBlocks(t *testing.T) {
	e := newEngine(t, Config{NumGPUBlocks: 10})
	id := mustAdd(t, e, Request{Prompt: seqTokens(40, 1), MaxTokens: 100})
	e.Step(0)
	if e.Stats().UsedBlocks != 3 {
		t.Fatalf("used %d blocks, want 3", e.Stats().UsedBlocks)
	}
	if err := e.Abort(id); err != nil {
		t.Fatal(err)
	}
	if st := e.Stats(); st.UsedBlocks != 0 || !e.Idle() {
		t.Fatalf("after abort: %+v", st)
	}
}

func TestResetPrefixCache(t *testing.T) {
	e := newEngine(t, Config{NumGPUBlocks: 10})
	tr := newTrace()
	mustAdd(t, e, Request{Prompt: seqTokens(40, 1), MaxTokens: 3})
	e.Step(0)
	if err := e.ResetPrefixCache(); !errors.Is(err, ErrBlocksInUse) {
		t.Fatalf("vllm-kv-events.md §3.3: reset with blocks in use = %v, want ErrBlocksInUse", err)
	}
	if ev := e.TakeEvents(); len(ev) != 0 {
		t.Fatalf("failed reset emitted %v", ev)
	}
	drain(t, e, tr, 10)
	if err := e.ResetPrefixCache(); err != nil {
		t.Fatal(err)
	}
	if ev := e.TakeEvents(); len(ev) != 1 || ev[0].Kind != EventAllBlocksCleared {
		t.Fatalf("reset events %v, want one AllBlocksCleared", ev)
	}
	id := mustAdd(t, e, Request{Prompt: seqTokens(40, 1), MaxTokens: 1})
	drain(t, e, tr, 10)
	if got := tr.finished[id].CachedTokens; got != 0 {
		t.Fatalf("after reset the prompt still hit %d tokens", got)
	}
}

func TestRemotePrefillAndPrefillOnly(t *testing.T) {
	const bs = 16
	m := testModel(t)
	p := newEngine(t, Config{NumGPUBlocks: 100})
	prompt := seqTokens(5*bs+3, 100)
	trP := newTrace()
	pid := mustAdd(t, p, Request{Prompt: prompt, MaxTokens: 50, PrefillOnly: true})
	drain(t, p, trP, 10)
	f := trP.finished[pid]
	if f.OutputTokens != 1 || f.Reason != FinishLength || len(f.BlockIDs) != 6 {
		t.Fatalf("vllm-kv-events.md §6.3 prefill leg: %+v, want 1 token, length, 6 block ids", f)
	}

	d := newEngine(t, Config{NumGPUBlocks: 100})
	trD := newTrace()
	did := mustAdd(t, d, Request{Prompt: prompt, MaxTokens: 3, RemotePrefill: true})
	res := d.Step(0)
	trD.record(res)
	if res.Duration != 0 || len(res.Tokens) != 0 {
		t.Fatalf("decode worker computed %+v while its KV is in flight", res.Shape)
	}
	ready, ok := d.NextTransfer()
	if want := m.TransferTime(len(prompt)); !ok || ready != want {
		t.Fatalf("transfer ready at %v, want %v", ready, want)
	}
	trD.now = ready
	drain(t, d, trD, 10)
	// Arrival caches the 5 full blocks (§3.7), then one step computes only the last token.
	if len(trD.stored) != 1 || len(trD.stored[0]) != 5 {
		t.Fatalf("vllm-kv-events.md §3.7: stores %v, want the 5 transferred blocks", trD.stored)
	}
	if got := trD.steps[1]; got.PrefillTokens != 1 {
		t.Fatalf("first step after the transfer computed %+v, want 1 prompt token", got)
	}
	if got := trD.finished[did]; got.CachedTokens != len(prompt) || got.OutputTokens != 3 { // vLLM 0.32 reports L
		t.Fatalf("decode request finished %+v", got)
	}
	// The received transfer is counted as vLLM's NixlConnector stats count it: its duration
	// and bytes (perf-model.md §4), what condisagg calibrate reads to fit the transfer term.
	st := d.Stats()
	if want := float64(len(prompt)) * m.BytesPerToken; st.KVTransfers != 1 || st.KVTransferTime != m.TransferTime(len(prompt)) || st.KVTransferBytes != want {
		t.Fatalf("transfer stats %d, %v, %v B; want 1, %v, %v B", st.KVTransfers, st.KVTransferTime, st.KVTransferBytes, m.TransferTime(len(prompt)), want)
	}
}

// workload adds n random requests sharing a few prefixes.
func workload(e *Engine, rng *rand.Rand, n int) {
	prefixes := [][]uint32{seqTokens(200, 10000), seqTokens(700, 20000), seqTokens(50, 30000)}
	for i := range n {
		p := append([]uint32(nil), prefixes[rng.IntN(len(prefixes))]...)
		p = append(p, seqTokens(1+rng.IntN(300), uint32(40000+1000*i))...)
		_, _ = e.Add(Request{Prompt: p, MaxTokens: 1 + rng.IntN(60)})
	}
}

func TestDeterministic(t *testing.T) {
	run := func(seed uint64) *trace {
		e := newEngine(t, Config{NumGPUBlocks: 300, MaxNumBatchedTokens: 1024, Seed: seed})
		tr := newTrace()
		workload(e, rand.New(rand.NewPCG(seed, 7)), 60)
		drain(t, e, tr, 100000)
		return tr
	}
	a, b := run(42), run(42)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two runs with seed 42 differ")
	}
	if c := run(43); reflect.DeepEqual(a.stored, c.stored) {
		t.Fatal("seed 43 gives the same block hashes as seed 42")
	}
	if len(a.removed) == 0 {
		t.Fatal("workload did not exercise eviction")
	}
}

// TestEventsTrackCache replays the engine's events into a naive refcounted set and checks it
// against the block pool after every step: a subscriber that sees every event knows exactly
// what is cached.
func TestEventsTrackCache(t *testing.T) {
	e := newEngine(t, Config{NumGPUBlocks: 120, MaxNumBatchedTokens: 512})
	workload(e, rand.New(rand.NewPCG(1, 2)), 80)
	held := map[uint64]int{}
	var now time.Duration
	for i := 0; !e.Idle(); i++ {
		if i > 100000 {
			t.Fatal("not idle")
		}
		res := e.Step(now)
		now += res.Duration
		for _, ev := range res.Events {
			switch ev.Kind {
			case EventBlockStored:
				if len(ev.Tokens) != len(ev.Hashes)*16 {
					t.Fatalf("§3.1: %d tokens for %d blocks", len(ev.Tokens), len(ev.Hashes))
				}
				if ev.HasParent && held[ev.Parent] == 0 {
					t.Fatalf("§3.1: store with parent %x that is not cached", ev.Parent)
				}
				for _, h := range ev.Hashes {
					held[h]++
				}
			case EventBlockRemoved:
				held[ev.Hashes[0]]--
				if held[ev.Hashes[0]] < 0 {
					t.Fatalf("removed %x more often than stored", ev.Hashes[0])
				}
			}
		}
		want := map[uint64]int{}
		for b := range e.pool.size() {
			if e.pool.cached[b] {
				want[e.pool.hash[b]]++
			}
		}
		for h, n := range held {
			if n != want[h] {
				t.Fatalf("step %d: events say %x is held %d times, the cache holds it %d times", i, h, n, want[h])
			}
		}
	}
}

// TestLoRAPrefixCache: an adapter's blocks hash apart from the base model's and from another
// adapter's (vLLM puts the adapter in every block's extra keys), so a prefix hit needs the same
// adapter; its BlockStored events name the adapter (docs/vllm-facts.md §d).
func TestLoRAPrefixCache(t *testing.T) {
	const bs = 16
	e := newEngine(t, Config{NumGPUBlocks: 1000})
	prompt := seqTokens(4*bs+1, 100)
	sql := Adapter{ID: 1, Name: "sql-lora", Path: "/adapters/sql"}
	run := func(lora Adapter) (Finished, []Event) {
		tr := newTrace()
		var evs []Event
		id := mustAdd(t, e, Request{Prompt: prompt, MaxTokens: 1, LoRA: lora})
		for !e.Idle() {
			res := e.Step(tr.now)
			tr.record(res)
			evs = append(evs, res.Events...)
			tr.now += res.Duration
		}
		return tr.finished[id], evs
	}
	base, baseEv := run(Adapter{})
	first, loraEv := run(sql)
	again, _ := run(sql)
	other, _ := run(Adapter{ID: 2, Name: "other-lora", Path: "/adapters/other"})
	if base.CachedTokens != 0 || first.CachedTokens != 0 || again.CachedTokens != 4*bs || other.CachedTokens != 0 {
		t.Fatalf("cached base=%d lora=%d lora again=%d other adapter=%d, want 0 0 %d 0",
			base.CachedTokens, first.CachedTokens, again.CachedTokens, other.CachedTokens, 4*bs)
	}
	if len(loraEv) != 1 || loraEv[0].LoRA != sql || len(baseEv) != 1 || baseEv[0].LoRA != (Adapter{}) {
		t.Fatalf("stored events: base %+v lora %+v", baseEv, loraEv)
	}
	if loraEv[0].Hashes[0] == baseEv[0].Hashes[0] {
		t.Fatal("the adapter's block 0 hashes like the base model's")
	}
}

// TestRemotePrefillTransferFails: a failed NIXL read under kv_load_failure_policy=recompute
// (docs/disagg-truth.md) recomputes the prompt after its local hit and reports only that hit.
func TestRemotePrefillTransferFails(t *testing.T) {
	const bs = 16
	m := testModel(t)
	prompt := seqTokens(5*bs+3, 100)
	for _, tc := range []struct {
		name     string
		warm     int // prompt tokens D computed before (its own prefix cache)
		wantHits int
	}{
		{name: "cold_decode_worker_reports_zero", warm: 0, wantHits: 0},
		{name: "local_hit_is_all_it_reports", warm: 2*bs + 5, wantHits: 2 * bs},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newEngine(t, Config{NumGPUBlocks: 100})
			tr := newTrace()
			if tc.warm > 0 {
				mustAdd(t, d, Request{Prompt: prompt[:tc.warm], MaxTokens: 1})
				drain(t, d, tr, 10)
			}
			id := mustAdd(t, d, Request{Prompt: prompt, MaxTokens: 3, RemotePrefill: true, TransferFails: true})
			tr.record(d.Step(tr.now))
			ready, ok := d.NextTransfer()
			if want := tr.now + m.TransferTime(len(prompt)-tc.wantHits); !ok || ready != want {
				t.Fatalf("transfer ready at %v (ok %v), want %v", ready, ok, want)
			}
			steps := len(tr.steps)
			tr.now = ready
			drain(t, d, tr, 10)
			if got := tr.steps[steps]; got.PrefillTokens != len(prompt)-tc.wantHits {
				t.Fatalf("first step after the failed transfer computed %d prompt tokens, want %d", got.PrefillTokens, len(prompt)-tc.wantHits)
			}
			if got := tr.finished[id]; got.CachedTokens != tc.wantHits || got.OutputTokens != 3 {
				t.Fatalf("decode request finished %+v, want %d cached tokens", got, tc.wantHits)
			}
			if st := d.Stats(); st.KVTransfers != 0 || st.KVTransferBytes != 0 {
				t.Fatalf("a failed read counted as a transfer: %+v", st)
			}
		})
	}
}
