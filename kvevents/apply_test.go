package kvevents

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/condisagg/condisagg/kvindex"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// ev describes one map-form event for test payloads; zero fields are omitted (nil).
type ev struct {
	kind      string // "BlockStored", "BlockRemoved", "AllBlocksCleared" or any tag
	hashes    []uint64
	parent    *uint64
	tokens    []uint32
	blockSize int64
	medium    string
	loraName  string
	loraID    *int64
	group     *int64
	specKind  string
	locality  string
}

func ptr[T any](v T) *T { return &v }

func (m mp) event(e ev) mp {
	n := uint32(1)
	fields := []func(mp) mp{}
	add := func(key string, f func(mp) mp) {
		n++
		fields = append(fields, func(m mp) mp { return f(m.str(key)) })
	}
	if e.kind == "BlockStored" || e.kind == "BlockRemoved" {
		add("block_hashes", func(m mp) mp {
			m = m.arr(uint32(len(e.hashes)))
			for _, h := range e.hashes {
				m = m.u64(h)
			}
			return m
		})
	}
	if e.kind == "BlockStored" {
		add("parent_block_hash", func(m mp) mp {
			if e.parent == nil {
				return m.nilv()
			}
			return m.u64(*e.parent)
		})
		add("token_ids", func(m mp) mp {
			m = m.arr(uint32(len(e.tokens)))
			for _, t := range e.tokens {
				m = m.u64(uint64(t))
			}
			return m
		})
		add("block_size", func(m mp) mp { return m.i64(e.blockSize) })
	}
	if e.loraID != nil {
		add("lora_id", func(m mp) mp { return m.i64(*e.loraID) })
	}
	for _, kv := range [][2]string{{"medium", e.medium}, {"lora_name", e.loraName}, {"kv_cache_spec_kind", e.specKind}, {"locality", e.locality}} {
		if kv[1] != "" {
			add(kv[0], func(m mp) mp { return m.str(kv[1]) })
		}
	}
	if e.group != nil {
		add("group_idx", func(m mp) mp { return m.i64(*e.group) })
	}
	m = m.mapN(n).str("type").str(e.kind)
	for _, f := range fields {
		m = f(m)
	}
	return m
}

// payload encodes [ts, events, rank] (rank < 0 => nil).
func payload(rank int64, events ...ev) []byte {
	m := mp(nil).arr(3).f64(1700000000.5).arr(uint32(len(events)))
	for _, e := range events {
		m = m.event(e)
	}
	if rank < 0 {
		return m.nilv()
	}
	return m.i64(rank)
}

type applyEnv struct {
	ix  *kvindex.Index
	m   *Metrics
	app *Applier
}

func newApplyEnv(t testing.TB, blockSize int, rank int64) *applyEnv {
	t.Helper()
	return newApplyEnvKeys(t, blockSize, rank, kvindex.KeysPlain)
}

func newApplyEnvKeys(t testing.TB, blockSize int, rank int64, keys kvindex.KeyScheme) *applyEnv {
	t.Helper()
	ix, err := kvindex.New(kvindex.Config{BlockSize: blockSize, Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	m := NewMetrics(prometheus.NewRegistry())
	return &applyEnv{ix: ix, m: m, app: NewApplier(ix, "w0", rank, m, Limits{})}
}

func (e *applyEnv) skipped(reason string) float64 {
	return testutil.ToFloat64(e.m.SkippedEvents.WithLabelValues("w0", reason))
}

func (e *applyEnv) events(kind Kind) float64 {
	return testutil.ToFloat64(e.m.Events.WithLabelValues("w0", kind.String()))
}

// overlap returns w0's cached prefix of tokens, in blocks per medium.
func (e *applyEnv) overlap(tokens []uint32, blockSize int, lora string) kvindex.WorkerOverlap {
	var lb []byte
	if lora != "" {
		lb = []byte(lora)
	}
	var out kvindex.Overlaps
	e.ix.Overlap(kvindex.Keys(tokens, blockSize, lb), &out)
	for _, w := range out.Workers {
		if w.Worker == "w0" {
			return w
		}
	}
	return kvindex.WorkerOverlap{Worker: "w0"}
}

func (e *applyEnv) blocks(m kvindex.Medium) int {
	st, _ := e.ix.Stats("w0")
	return st.Blocks[m]
}

func (e *applyEnv) mustApply(t *testing.T, p []byte) {
	t.Helper()
	if err := e.app.ApplyPayload(p); err != nil {
		t.Fatalf("ApplyPayload: %v", err)
	}
}

// TestApplyVectorC: §2.6 vector C end to end. The original format (2-element batch, signed
// hashes, nil medium) stores EHs 0xfffffffffffffffe and 0x5 and removes the first; only EH 0x5
// (router key 0x51bdd8da9da7a8e2) stays, so a lookup of [1,2,3,4] matches 0 blocks.
func TestApplyVectorC(t *testing.T) {
	e := newApplyEnv(t, 2, 7) // rank nil in the batch => the stream's rank, whatever it is
	e.mustApply(t, readFixture(t, "vector_c_original_msgspec.bin"))
	keys := kvindex.Keys([]uint32{1, 2, 3, 4}, 2, nil)
	if len(keys) != 2 || keys[1] != 0x51bdd8da9da7a8e2 {
		t.Fatalf("keys = %#x", keys)
	}
	if got := e.overlap([]uint32{1, 2, 3, 4}, 2, ""); got.GPU != 0 {
		t.Errorf("lookup of [1,2,3,4] matches %d GPU blocks, want 0", got.GPU)
	}
	var out kvindex.Overlaps
	e.ix.Overlap(keys[1:], &out)
	if len(out.Workers) != 1 || out.Workers[0].GPU != 1 {
		t.Errorf("key 0x51bdd8da9da7a8e2: overlaps %+v, want w0 holding it on GPU", out.Workers)
	}
	if got := e.blocks(kvindex.GPU); got != 1 {
		t.Errorf("w0 holds %d GPU entries, want 1 (EH 0x5)", got)
	}
	if e.events(KindBlockStored) != 1 || e.events(KindBlockRemoved) != 1 || e.skipped("block_not_found") != 0 {
		t.Errorf("stored %v removed %v not_found %v", e.events(KindBlockStored), e.events(KindBlockRemoved), e.skipped("block_not_found"))
	}
	// Removing EH 0xfffffffffffffffe again finds nothing: the store/remove pairing is per EH.
	e.mustApply(t, payload(-1, ev{kind: "BlockRemoved", hashes: []uint64{0xfffffffffffffffe}}))
	if e.skipped("block_not_found") != 1 {
		t.Errorf("block_not_found = %v, want 1", e.skipped("block_not_found"))
	}
}

// TestApplyVectorDRank: §2.6 vector D and §1.3. On rank 3 the CPU remove is applied to the CPU
// tier only and counted as non_gpu_medium{CPU}; on any other rank the whole batch is dropped.
func TestApplyVectorDRank(t *testing.T) {
	const eh = 0x0102030405060708
	gpuStore := payload(-1, ev{kind: "BlockStored", hashes: []uint64{eh}, tokens: []uint32{1, 2}, blockSize: 2, medium: "GPU"})
	for _, rank := range []int64{3, 0, 2, 4} {
		t.Run(fmt.Sprintf("stream_rank_%d", rank), func(t *testing.T) {
			e := newApplyEnv(t, 2, rank)
			e.mustApply(t, gpuStore)
			err := e.app.ApplyPayload(readFixture(t, "vector_d_map_bin_cpu_msgspec.bin"))
			dropped := testutil.ToFloat64(e.m.DroppedFrames.WithLabelValues("w0", "rank_mismatch"))
			cpu := testutil.ToFloat64(e.m.NonGPUMedium.WithLabelValues("w0", "CPU"))
			if rank == 3 {
				if err != nil || dropped != 0 || cpu != 1 || e.skipped("block_not_found") != 1 {
					t.Fatalf("err %v dropped %v non_gpu{CPU} %v block_not_found %v; want nil 0 1 1", err, dropped, cpu, e.skipped("block_not_found"))
				}
			} else if !errors.Is(err, ErrRankMismatch) || dropped != 1 || cpu != 0 {
				t.Fatalf("err %v dropped %v non_gpu{CPU} %v; want ErrRankMismatch 1 0", err, dropped, cpu)
			}
			if got := e.overlap([]uint32{1, 2}, 2, ""); got.GPU != 1 {
				t.Errorf("GPU block gone (overlap %+v): a CPU remove must never touch GPU", got)
			}
		})
	}
}

// TestApplyHybridGroups: §3.5. Each case stores one block [1,2,3,4] (B=4) with a group/kind and
// then removes it with the same group_idx (removes carry no kind).
func TestApplyHybridGroups(t *testing.T) {
	cases := []struct {
		name    string
		spec    string
		group   *int64
		kind    string
		indexed bool
	}{
		{"kind_absent_group_nil", "§3.5", nil, "", true},
		{"kind_absent_group_0", "§3.5", ptr[int64](0), "", true},
		{"kind_absent_group_1_skipped", "§3.5", ptr[int64](1), "", false},
		{"full_attention_group_0", "§3.5", ptr[int64](0), "full_attention", true},
		{"mla_attention_group_1", "§3.5", ptr[int64](1), "mla_attention", true},
		{"sink_full_attention_group_2", "§3.5", ptr[int64](2), "sink_full_attention", true},
		{"sliding_window_skipped", "§3.5", ptr[int64](0), "sliding_window", false},
		{"mamba_skipped", "§3.5", ptr[int64](3), "mamba", false},
		{"chunked_local_skipped", "§3.5", ptr[int64](1), "chunked_local_attention", false},
		{"kind_no_group", "§3.5", nil, "full_attention", true},
	}
	toks := []uint32{1, 2, 3, 4}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newApplyEnv(t, 4, 0)
			e.mustApply(t, payload(0, ev{kind: "BlockStored", hashes: []uint64{9}, tokens: toks, blockSize: 4, group: tc.group, specKind: tc.kind}))
			held := e.overlap(toks, 4, "").GPU == 1
			if held != tc.indexed || (e.skipped("hybrid_group") == 1) == tc.indexed {
				t.Fatalf("store: held %v hybrid_group %v; want held %v", held, e.skipped("hybrid_group"), tc.indexed)
			}
			e.mustApply(t, payload(0, ev{kind: "BlockRemoved", hashes: []uint64{9}, group: tc.group}))
			if e.overlap(toks, 4, "").GPU != 0 {
				t.Errorf("remove of an indexed group's block did not apply")
			}
			if want := map[bool]float64{true: 0, false: 2}[tc.indexed]; e.skipped("hybrid_group") != want || e.skipped("block_not_found") != 0 {
				t.Errorf("hybrid_group %v block_not_found %v, want %v 0", e.skipped("hybrid_group"), e.skipped("block_not_found"), want)
			}
		})
	}
}

// TestApplyLoRA: §4.2 step 2 and §4.6. lora_id without lora_name cannot be resolved and is
// skipped; with lora_name the blocks are keyed with the adapter's seed.
func TestApplyLoRA(t *testing.T) {
	toks := []uint32{1, 2, 3, 4}
	e := newApplyEnv(t, 2, 0)
	e.mustApply(t, payload(0,
		ev{kind: "BlockStored", hashes: []uint64{1, 2}, tokens: toks, blockSize: 2, loraID: ptr[int64](3)},
		ev{kind: "BlockStored", hashes: []uint64{3, 4}, tokens: toks, blockSize: 2, loraID: ptr[int64](3), loraName: "sql-lora"},
	))
	if e.skipped("lora_unresolved") != 1 || e.events(KindBlockStored) != 1 {
		t.Fatalf("lora_unresolved %v stored %v, want 1 1", e.skipped("lora_unresolved"), e.events(KindBlockStored))
	}
	if got := e.overlap(toks, 2, "sql-lora").GPU; got != 2 {
		t.Errorf("LoRA lookup matches %d blocks, want 2", got)
	}
	if got := e.overlap(toks, 2, "").GPU; got != 0 {
		t.Errorf("base-model lookup matches %d blocks, want 0 (LoRA keys differ)", got)
	}
}

// TestApplyMalformedSkipped: §2.4 rule 5. Every malformed event is skipped and counted while
// the valid event after them applies.
func TestApplyMalformedSkipped(t *testing.T) {
	e := newApplyEnv(t, 2, 0)
	e.mustApply(t, readFixture(t, "malformed_events_then_valid_msgspec.bin"))
	if got := e.skipped("malformed_event"); got != 13 {
		t.Errorf("malformed_event = %v, want 13", got)
	}
	if e.events(KindBlockStored) != 1 || e.overlap([]uint32{1, 2}, 2, "").GPU != 1 {
		t.Errorf("the valid store after the malformed events was not applied")
	}
	if got := testutil.ToFloat64(e.m.Batches.WithLabelValues("w0")); got != 1 {
		t.Errorf("batches = %v, want 1", got)
	}
}

// TestApplyMedia: §3.4 with the index keeping every tier. Device spellings go to GPU, CPU and
// storage tiers to their own tier (counted per medium), unknown media are counted and skipped.
func TestApplyMedia(t *testing.T) {
	cases := []struct {
		medium string
		tier   kvindex.Medium
		label  string // non_gpu_medium label, "" = not counted
		known  bool
	}{
		{"", kvindex.GPU, "", true},
		{"GPU", kvindex.GPU, "", true},
		{"gpu", kvindex.GPU, "", true},
		{"CPU", kvindex.CPU, "CPU", true},
		{"cpu_pinned", kvindex.CPU, "CPU_PINNED", true},
		{"STORAGE", kvindex.Disk, "STORAGE", true},
		{"FS", kvindex.Disk, "FS", true},
		{"OBJ", kvindex.Disk, "OBJ", true},
		{"TAPE", 0, "other", false},
	}
	toks := []uint32{1, 2}
	for _, tc := range cases {
		t.Run("medium_"+tc.medium, func(t *testing.T) {
			e := newApplyEnv(t, 2, 0)
			e.mustApply(t, payload(0, ev{kind: "BlockStored", hashes: []uint64{5}, tokens: toks, blockSize: 2, medium: tc.medium}))
			if tc.label != "" {
				if got := testutil.ToFloat64(e.m.NonGPUMedium.WithLabelValues("w0", tc.label)); got != 1 {
					t.Errorf("non_gpu_medium{%s} = %v, want 1", tc.label, got)
				}
			}
			if !tc.known {
				if e.skipped("unknown_medium") != 1 || e.events(KindBlockStored) != 0 || e.blocks(kvindex.GPU) != 0 {
					t.Errorf("unknown medium: unknown_medium %v, stored %v", e.skipped("unknown_medium"), e.events(KindBlockStored))
				}
				return
			}
			if got := e.blocks(tc.tier); got != 1 {
				t.Errorf("tier %v holds %d entries, want 1", tc.tier, got)
			}
			e.mustApply(t, payload(0, ev{kind: "BlockRemoved", hashes: []uint64{5}, medium: tc.medium}))
			if got := e.blocks(tc.tier); got != 0 {
				t.Errorf("after the remove tier %v holds %d entries, want 0", tc.tier, got)
			}
		})
	}
}

// TestApplyUnknownTags: §2.4 rule 4, with the per-stream bound on tag labels.
func TestApplyUnknownTags(t *testing.T) {
	e := newApplyEnv(t, 2, 0)
	e.mustApply(t, readFixture(t, "unknown_tags_msgspec.bin"))
	for _, tag := range []string{"BlockUpdated", "Heartbeat"} {
		if got := testutil.ToFloat64(e.m.UnknownEvents.WithLabelValues("w0", tag)); got != 1 {
			t.Errorf("unknown_event{%s} = %v, want 1", tag, got)
		}
	}
	if e.skipped("unknown_event") != 2 || e.events(KindBlockStored) != 1 || e.events(KindAllBlocksCleared) != 1 {
		t.Errorf("unknown_event %v stored %v cleared %v", e.skipped("unknown_event"), e.events(KindBlockStored), e.events(KindAllBlocksCleared))
	}
	var evs []ev
	for i := range 10 {
		evs = append(evs, ev{kind: fmt.Sprintf("Future%d", i)})
	}
	evs = append(evs, ev{kind: "bad\xfftag"})
	e.mustApply(t, payload(0, evs...))
	if n := testutil.CollectAndCount(e.m.UnknownEvents); n != maxTagLabels+1 {
		t.Errorf("%d unknown-tag series, want %d (bounded, then other)", n, maxTagLabels+1)
	}
	if got := testutil.ToFloat64(e.m.UnknownEvents.WithLabelValues("w0", "other")); got != 5 {
		t.Errorf("unknown_event{other} = %v, want 5", got)
	}
}

// TestApplyClearAndDecodeFailure: §3.3 (AllBlocksCleared empties this stream only) and §2.4
// rule 6 (a batch that fails to decode is rejected whole and counted; Clear empties the stream).
func TestApplyClearAndDecodeFailure(t *testing.T) {
	e := newApplyEnv(t, 2, 0)
	other := NewApplier(e.ix, "w1", 0, e.m, Limits{})
	store := payload(0, ev{kind: "BlockStored", hashes: []uint64{5}, tokens: []uint32{1, 2}, blockSize: 2})
	e.mustApply(t, store)
	if err := other.ApplyPayload(store); err != nil {
		t.Fatal(err)
	}
	e.mustApply(t, payload(0, ev{kind: "AllBlocksCleared"}))
	var out kvindex.Overlaps
	e.ix.Overlap(kvindex.Keys([]uint32{1, 2}, 2, nil), &out)
	if len(out.Workers) != 1 || out.Workers[0].Worker != "w1" {
		t.Fatalf("after w0's AllBlocksCleared overlaps are %+v, want only w1", out.Workers)
	}

	e.mustApply(t, store)
	err := e.app.ApplyPayload(store[:len(store)-3])
	if !errors.Is(err, ErrMalformedBatch) {
		t.Fatalf("truncated batch: %v, want ErrMalformedBatch", err)
	}
	if got := testutil.ToFloat64(e.m.DroppedFrames.WithLabelValues("w0", "decode_error")); got != 1 {
		t.Errorf("decode_error = %v, want 1", got)
	}
	if e.blocks(kvindex.GPU) != 1 {
		t.Errorf("a rejected batch changed the index")
	}
	e.app.Clear()
	if e.blocks(kvindex.GPU) != 0 || e.overlap([]uint32{1, 2}, 2, "").GPU != 0 {
		t.Errorf("Clear left entries")
	}
}

// TestApplyIndexSkipReasons: the index's skip reasons reach the counter under the index's own
// label (§4.2 steps 1, 3, 4; §3.6).
func TestApplyIndexSkipReasons(t *testing.T) {
	for r := kvindex.SkipParentNotFound; r <= kvindex.SkipFenced; r++ {
		if got := indexSkipReason(r).String(); got != r.String() {
			t.Errorf("kvindex reason %v maps to label %q", r, got)
		}
	}
	e := newApplyEnv(t, 2, 0)
	e.mustApply(t, payload(0,
		ev{kind: "BlockStored", hashes: []uint64{1}, parent: ptr[uint64](99), tokens: []uint32{1, 2}, blockSize: 2},
		ev{kind: "BlockStored", hashes: []uint64{2}, tokens: []uint32{1, 2, 3, 4}, blockSize: 4},
		ev{kind: "BlockStored", hashes: []uint64{3}, tokens: []uint32{1, 2, 3, 4}, blockSize: 2},
		ev{kind: "BlockStored", hashes: []uint64{4, 4}, tokens: []uint32{1, 2, 3, 4}, blockSize: 2},
		ev{kind: "BlockStored", hashes: []uint64{5, 6}, tokens: []uint32{1, 2, 3}, blockSize: 2},
	))
	for _, reason := range []string{"parent_not_found", "block_size_mismatch", "token_mismatch", "duplicate_hash", "short_tokens"} {
		if got := e.skipped(reason); got != 1 {
			t.Errorf("%s = %v, want 1", reason, got)
		}
	}
	if got := e.overlap([]uint32{1, 2, 3, 4}, 2, "").GPU; got != 1 {
		t.Errorf("short store indexed %d blocks, want the 1 covered block", got)
	}
}

// TestApplyTRTLLM: §7. One map event per batch, signed int64 hashes chained across batches, no
// medium; the removed hash is matched by its two's-complement bits.
func TestApplyTRTLLM(t *testing.T) {
	e := newApplyEnv(t, 16, 0)
	e.mustApply(t, readFixture(t, "trtllm_stored_signed_msgspec.bin")) // parent -9 unknown
	if e.skipped("parent_not_found") != 1 {
		t.Fatalf("parent_not_found = %v, want 1", e.skipped("parent_not_found"))
	}
	toks := make([]uint32, 48)
	for i := range toks {
		toks[i] = uint32(i)
	}
	neg := func(v int64) *uint64 { u := uint64(v); return &u }
	e.mustApply(t, payload(0, ev{kind: "BlockStored", hashes: []uint64{*neg(-9)}, tokens: toks[:16], blockSize: 16}))
	e.mustApply(t, readFixture(t, "trtllm_stored_signed_msgspec.bin"))
	if got := e.overlap(append([]uint32(nil), append(toks[:16:16], toks...)...), 16, "").GPU; got != 4 {
		t.Errorf("chained TRT-LLM stores: %d blocks, want 4", got)
	}
	e.mustApply(t, readFixture(t, "trtllm_removed_msgspec.bin"))
	if got := e.overlap(append(toks[:16:16], toks...), 16, "").GPU; got != 1 {
		t.Errorf("after removing the first signed hash: %d blocks, want 1", got)
	}

	// block_mm_infos[1] is non-nil: block 0 is indexed, blocks 1 and 2 are an excluded chain.
	mm := newApplyEnv(t, 16, 0)
	mm.mustApply(t, readFixture(t, "trtllm_stored_mm_infos_msgspec.bin"))
	if got := mm.overlap(toks, 16, "").GPU; got != 1 || mm.blocks(kvindex.GPU) != 3 {
		t.Errorf("mm store: %d blocks matched, %d entries; want 1 and 3", got, mm.blocks(kvindex.GPU))
	}
}

// TestApplyDoesNotAllocate checks the zero-allocation steady state of decode + apply.
func TestApplyDoesNotAllocate(t *testing.T) {
	e := newApplyEnv(t, 16, 0)
	batches := realisticBatches(4, 8, 16)
	for _, p := range batches {
		e.mustApply(t, p)
	}
	allocs := testing.AllocsPerRun(20, func() {
		for _, p := range batches {
			if err := e.app.ApplyPayload(p); err != nil {
				t.Fatal(err)
			}
		}
	})
	if allocs != 0 {
		t.Errorf("%.1f allocations per %d batches, want 0", allocs, len(batches))
	}
}

// TestApplyChainsAndRefcounts: §3.6 and §8 "Semantics and index" through the decoder: a chain
// of stores across batches, an orphaned chain skipped, and refcounted duplicate stores.
func TestApplyChainsAndRefcounts(t *testing.T) {
	toks := []uint32{1, 2, 3, 4, 5, 6}
	e := newApplyEnv(t, 2, 0)
	e.mustApply(t, payload(0, ev{kind: "BlockStored", hashes: []uint64{10}, tokens: toks[:2], blockSize: 2}))
	e.mustApply(t, payload(0, ev{kind: "BlockStored", hashes: []uint64{11}, parent: ptr[uint64](10), tokens: toks[2:4], blockSize: 2}))
	e.mustApply(t, payload(0,
		ev{kind: "BlockStored", hashes: []uint64{21}, parent: ptr[uint64](20), tokens: toks[2:4], blockSize: 2}, // orphan
		ev{kind: "BlockStored", hashes: []uint64{22}, parent: ptr[uint64](21), tokens: toks[4:6], blockSize: 2}, // its child
		ev{kind: "BlockStored", hashes: []uint64{12}, parent: ptr[uint64](11), tokens: toks[4:6], blockSize: 2},
	))
	if got := e.overlap(toks, 2, "").GPU; got != 3 || e.skipped("parent_not_found") != 2 {
		t.Fatalf("chain: %d blocks, parent_not_found %v; want 3 and 2", got, e.skipped("parent_not_found"))
	}
	// A second store of EH 12 with its parent (vLLM recomputing the last block of a
	// block-aligned prompt: a second physical copy) needs two removes.
	e.mustApply(t, payload(0, ev{kind: "BlockStored", hashes: []uint64{12}, parent: ptr[uint64](11), tokens: toks[4:6], blockSize: 2}))
	e.mustApply(t, payload(0, ev{kind: "BlockRemoved", hashes: []uint64{12}}))
	if got := e.overlap(toks, 2, "").GPU; got != 3 {
		t.Errorf("after one of two removes: %d blocks, want 3", got)
	}
	e.mustApply(t, payload(0, ev{kind: "BlockRemoved", hashes: []uint64{12}}))
	if got := e.overlap(toks, 2, "").GPU; got != 2 {
		t.Errorf("after the second remove: %d blocks, want 2", got)
	}
	// A parentless re-store of held blocks (kv_cache_report_mode "full" re-announcing a hit)
	// is no new copy: one remove per block still evicts them.
	e.mustApply(t, payload(0, ev{kind: "BlockStored", hashes: []uint64{10, 11}, tokens: toks[:4], blockSize: 2}))
	e.mustApply(t, payload(0, ev{kind: "BlockRemoved", hashes: []uint64{10}}))
	if got := e.overlap(toks, 2, "").GPU; got != 0 {
		t.Errorf("after evicting block 0 once: %d blocks, want 0", got)
	}
}

// TestApplyStoredInLastBatch checks the liveness signal of conditional-disagg.md §8.3: only a
// batch with a BlockStored the index accepted counts, not removals or skipped stores.
func TestApplyStoredInLastBatch(t *testing.T) {
	toks := []uint32{1, 2, 3, 4}
	e := newApplyEnv(t, 2, 0)
	cases := []struct {
		spec string
		p    []byte
		want int
	}{
		{"§8.3: accepted stores count", payload(0,
			ev{kind: "BlockStored", hashes: []uint64{10}, tokens: toks[:2], blockSize: 2},
			ev{kind: "BlockStored", hashes: []uint64{11}, parent: ptr[uint64](10), tokens: toks[2:], blockSize: 2}), 2},
		{"§8.3: a batch of removals is not a store", payload(0, ev{kind: "BlockRemoved", hashes: []uint64{11}}), 0},
		{"§4.2 step 3: an orphan store is skipped, not accepted", payload(0,
			ev{kind: "BlockStored", hashes: []uint64{31}, parent: ptr[uint64](30), tokens: toks[:2], blockSize: 2}), 0},
		{"§3.5: a sliding-window group store is filtered", payload(0,
			ev{kind: "BlockStored", hashes: []uint64{40}, tokens: toks[:2], blockSize: 2, specKind: "sliding_window", group: ptr[int64](1)}), 0},
	}
	for _, c := range cases {
		e.mustApply(t, c.p)
		if got := e.app.StoredInLastBatch(); got != c.want {
			t.Errorf("%s: StoredInLastBatch = %d, want %d", c.spec, got, c.want)
		}
	}
}

// TestApplyBlockSizeMismatch: events of another block size than the router's are refused, and
// the Applier says so in one error naming the worker and both sizes, with a gauge holding the
// engine's size until a store of the right size arrives.
func TestApplyBlockSizeMismatch(t *testing.T) {
	e := newApplyEnv(t, 2, 0)
	if err := e.app.BlockSizeMismatch(); err != nil {
		t.Fatalf("mismatch before any event: %v", err)
	}
	gauge := func() float64 { return testutil.ToFloat64(e.m.BlockSizeMismatch.WithLabelValues("w0")) }
	e.mustApply(t, payload(0, ev{kind: "BlockStored", hashes: []uint64{1}, tokens: []uint32{1, 2, 3, 4}, blockSize: 4}))
	err := e.app.BlockSizeMismatch()
	if err == nil || !strings.Contains(err.Error(), "worker w0: KV events carry block_size 4 but the router's --block-size (model.block_size) is 2") ||
		!strings.Contains(err.Error(), "set model.block_size to 4") {
		t.Fatalf("mismatch error: %v", err)
	}
	if e.app.BlockSizeMismatch() != nil {
		t.Fatal("the report was not reset")
	}
	if g := gauge(); g != 4 || e.skipped("block_size_mismatch") != 1 || e.blocks(kvindex.GPU) != 0 {
		t.Fatalf("gauge %v, skipped %v, blocks %d", g, e.skipped("block_size_mismatch"), e.blocks(kvindex.GPU))
	}
	e.mustApply(t, payload(0, ev{kind: "BlockStored", hashes: []uint64{2}, tokens: []uint32{1, 2}, blockSize: 2}))
	if g := gauge(); g != 0 || e.app.BlockSizeMismatch() != nil {
		t.Fatalf("after a matching store: gauge %v", g)
	}
}

// TestApplyLateClearWins: vLLM's reset_prefix_cache emits AllBlocksCleared late, after stores
// of blocks that were cached before the reset. Whatever precedes the clear in the stream goes
// with it, a later store that continues a pre-clear chain is refused (its parent is gone), and
// a store after the clear that starts a new chain is indexed: a clear always wins over the
// stale stores around it.
func TestApplyLateClearWins(t *testing.T) {
	e := newApplyEnv(t, 2, 0)
	e.mustApply(t, payload(0, ev{kind: "BlockStored", hashes: []uint64{1}, tokens: []uint32{1, 2}, blockSize: 2}))
	e.mustApply(t, payload(0, ev{kind: "BlockStored", hashes: []uint64{2}, parent: ptr[uint64](1), tokens: []uint32{3, 4}, blockSize: 2}))
	e.mustApply(t, payload(0, ev{kind: "AllBlocksCleared"}))
	e.mustApply(t, payload(0, ev{kind: "BlockStored", hashes: []uint64{3}, parent: ptr[uint64](2), tokens: []uint32{5, 6}, blockSize: 2}))
	if got := e.overlap([]uint32{1, 2, 3, 4, 5, 6}, 2, "").GPU; got != 0 {
		t.Fatalf("after the clear the stale chain still earns %d blocks", got)
	}
	if e.skipped("parent_not_found") != 1 {
		t.Fatalf("the store continuing a cleared chain was not refused: parent_not_found = %v", e.skipped("parent_not_found"))
	}
	e.mustApply(t, payload(0, ev{kind: "BlockStored", hashes: []uint64{7}, tokens: []uint32{9, 9}, blockSize: 2}))
	if got := e.overlap([]uint32{9, 9}, 2, "").GPU; got != 1 {
		t.Fatalf("a new chain after the clear: %d blocks, want 1", got)
	}
}

// TestApplyNegativeTokenError: a BlockStored with a negative token id is skipped and reported
// with the index and value of the bad id, not only the field.
func TestApplyNegativeTokenError(t *testing.T) {
	e := newApplyEnv(t, 2, 0)
	bad := payload(0, ev{kind: "BlockStored", hashes: []uint64{1}, tokens: []uint32{1, 2}, blockSize: 2})
	// The encoder writes token 2 as positive fixint 0x02 right after 0x01; make it -7 (0xf9).
	i := bytes.Index(bad, []byte{0x92, 0x01, 0x02})
	if i < 0 {
		t.Fatalf("token list not found in %x", bad)
	}
	bad[i+2] = 0xf9
	e.mustApply(t, bad)
	err := e.app.MalformedEvent()
	if err == nil || !strings.Contains(err.Error(), "token_ids[1] = -7: token ids are unsigned 32-bit integers") {
		t.Fatalf("malformed error: %v", err)
	}
	if e.skipped("malformed_event") != 1 || e.blocks(kvindex.GPU) != 0 || e.app.MalformedEvent() != nil {
		t.Fatalf("skipped %v, blocks %d", e.skipped("malformed_event"), e.blocks(kvindex.GPU))
	}
}

// TestApplyParentZeroIsRoot: llm-d's KV-cache simulator publishes parent 0 (array form) for a
// block with no parent; it starts a chain like vLLM's nil, instead of being refused as an
// unknown parent.
func TestApplyParentZeroIsRoot(t *testing.T) {
	e := newApplyEnv(t, 2, 0)
	e.mustApply(t, payload(0, ev{kind: "BlockStored", hashes: []uint64{5, 6}, parent: ptr[uint64](0), tokens: []uint32{1, 2, 3, 4}, blockSize: 2}))
	if got := e.overlap([]uint32{1, 2, 3, 4}, 2, "").GPU; got != 2 || e.skipped("parent_not_found") != 0 {
		t.Fatalf("parent 0: %d blocks, parent_not_found %v; want 2 and 0", got, e.skipped("parent_not_found"))
	}
}

// TestApplyFencedReset: a reset the router started (kvindex fence.go) against vLLM's late
// AllBlocksCleared (docs/vllm-facts.md §b): a batch the engine published before the reset
// must not put its blocks back; the engine's next batch, [AllBlocksCleared, its own stores],
// lifts the fence and applies; a restart clear (Applier.Clear) lifts it too.
func TestApplyFencedReset(t *testing.T) {
	e := newApplyEnv(t, 2, 0)
	stale := payload(0, ev{kind: "BlockStored", hashes: []uint64{5, 6}, tokens: []uint32{1, 2, 3, 4}, blockSize: 2})
	e.mustApply(t, payload(0, ev{kind: "BlockStored", hashes: []uint64{7}, tokens: []uint32{9, 9}, blockSize: 2}))
	f := e.ix.Fence("w0")
	if !e.ix.ClearFenced("w0", f) || e.blocks(kvindex.GPU) != 0 {
		t.Fatalf("ClearFenced left %d blocks", e.blocks(kvindex.GPU))
	}
	e.mustApply(t, stale) // emitted before the reset, applied after it
	if got := e.overlap([]uint32{1, 2, 3, 4}, 2, "").GPU; got != 0 {
		t.Fatalf("a store from before the reset was applied: overlap %d blocks", got)
	}
	if got := e.skipped("fenced"); got != 1 {
		t.Errorf("skipped{fenced} = %v, want 1", got)
	}
	e.mustApply(t, payload(0, ev{kind: "AllBlocksCleared"},
		ev{kind: "BlockStored", hashes: []uint64{5}, tokens: []uint32{1, 2}, blockSize: 2}))
	if got := e.overlap([]uint32{1, 2, 3, 4}, 2, "").GPU; got != 1 || e.ix.Fenced("w0") {
		t.Fatalf("after the engine's clear: overlap %d (want 1), fenced %v", got, e.ix.Fenced("w0"))
	}

	e.ix.Fence("w0") // a reset whose clear never comes: the engine restarted instead
	e.app.Clear()
	e.mustApply(t, stale)
	if got := e.overlap([]uint32{1, 2, 3, 4}, 2, ""); got.GPU != 2 {
		t.Errorf("after a restart clear the new engine's store gave overlap %d, want 2", got.GPU)
	}
}
