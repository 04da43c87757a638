package kvindex

import (
	"maps"
	"strings"
	"testing"
)

// doc is a 4-block token sequence at B = 2; ehN are the engine hashes a worker gives its blocks.
var doc = []uint32{1, 2, 3, 4, 5, 6, 7, 8}

const (
	eh0 uint64 = 100 + iota
	eh1
	eh2
	eh3
)

// gpuStore is a well-formed GPU store of doc blocks [from, to) with engine hashes 100+i.
func gpuStore(from, to int) *Store {
	s := &Store{BlockSize: 2, Tokens: doc[2*from : 2*to], PlainBlocks: to - from}
	for i := from; i < to; i++ {
		s.Hashes = append(s.Hashes, 100+uint64(i))
	}
	if from > 0 {
		s.HasParent, s.Parent = true, 100+uint64(from-1)
	}
	return s
}

// placeholder is an OffloadingConnector-style store of doc blocks [from, to) in medium m.
func placeholder(m Medium, from, to int) *Store {
	s := &Store{Medium: m}
	for i := from; i < to; i++ {
		s.Hashes = append(s.Hashes, 100+uint64(i))
	}
	return s
}

type step struct {
	w      WorkerID
	store  *Store
	want   StoreResult
	remove []uint64 // with medium rm; wantRemoved/wantNotFound
	rm     Medium
	wantRm [2]int
	clear  bool
	drop   bool
	cap    int // SetCapacity when > 0
}

func TestIndexRules(t *testing.T) {
	type overlaps = map[WorkerID]WorkerOverlap
	cases := []struct {
		name, spec string
		cfg        Config
		steps      []step
		query      []uint32 // default doc
		lora       []byte
		want       overlaps
		stats      map[WorkerID]WorkerStats
	}{
		{
			name: "chain_across_batches_from_nil_parent", spec: "vllm-kv-events.md §8, §4.2",
			steps: []step{{w: "a", store: gpuStore(0, 2), want: StoreResult{Stored: 2}},
				{w: "a", store: gpuStore(2, 4), want: StoreResult{Stored: 2}}},
			want:  overlaps{"a": {Worker: "a", GPU: 4}},
			stats: map[WorkerID]WorkerStats{"a": {Blocks: [NumMedia]int{4, 0, 0}}},
		},
		{
			name: "unknown_parent_skips_event_and_orphaned_chain", spec: "§4.2 step 3, §8",
			steps: []step{{w: "a", store: gpuStore(0, 1), want: StoreResult{Stored: 1}},
				{w: "a", store: gpuStore(2, 3), want: StoreResult{Skip: SkipParentNotFound}},
				{w: "a", store: gpuStore(3, 4), want: StoreResult{Skip: SkipParentNotFound}}},
			want:  overlaps{"a": {Worker: "a", GPU: 1}},
			stats: map[WorkerID]WorkerStats{"a": {Blocks: [NumMedia]int{1, 0, 0}}},
		},
		{
			name: "duplicate_store_needs_two_removes", spec: "§3.6, §8",
			steps: []step{{w: "a", store: gpuStore(0, 2), want: StoreResult{Stored: 2}},
				{w: "a", store: gpuStore(1, 2), want: StoreResult{Stored: 1}},
				{w: "a", remove: []uint64{eh1}, wantRm: [2]int{1, 0}}},
			want: overlaps{"a": {Worker: "a", GPU: 2}},
		},
		{
			name: "refcount_beyond_three_is_exact", spec: "§3.6",
			steps: []step{{w: "a", store: gpuStore(0, 2), want: StoreResult{Stored: 2}},
				{w: "a", store: gpuStore(1, 2), want: StoreResult{Stored: 1}},
				{w: "a", store: gpuStore(1, 2), want: StoreResult{Stored: 1}},
				{w: "a", store: gpuStore(1, 2), want: StoreResult{Stored: 1}},
				{w: "a", store: gpuStore(1, 2), want: StoreResult{Stored: 1}},
				{w: "a", remove: []uint64{eh1, eh1, eh1, eh1}, wantRm: [2]int{4, 0}},
				{w: "a", store: gpuStore(2, 3), want: StoreResult{Stored: 1}},
				{w: "a", remove: []uint64{eh1, eh1}, wantRm: [2]int{1, 1}}}, // 5 stores, 6 removes
			want:  overlaps{"a": {Worker: "a", GPU: 1}},
			stats: map[WorkerID]WorkerStats{"a": {Blocks: [NumMedia]int{2, 0, 0}}},
		},
		{
			name: "second_remove_withdraws_and_unknown_remove_counted", spec: "§3.6, §8",
			steps: []step{{w: "a", store: gpuStore(0, 2), want: StoreResult{Stored: 2}},
				{w: "a", store: gpuStore(1, 2), want: StoreResult{Stored: 1}},
				{w: "a", remove: []uint64{eh1, eh1, 999}, wantRm: [2]int{2, 1}},
				{w: "zz", remove: []uint64{eh0}, wantRm: [2]int{0, 1}}},
			want:  overlaps{"a": {Worker: "a", GPU: 1}},
			stats: map[WorkerID]WorkerStats{"a": {Blocks: [NumMedia]int{1, 0, 0}}},
		},
		{
			name: "repeated_hash_skipped", spec: "§3.6",
			steps: []step{{w: "a", store: &Store{Hashes: []uint64{1, 2, 1}, Tokens: doc[:6], BlockSize: 2, PlainBlocks: 3},
				want: StoreResult{Skip: SkipDuplicateHash}}},
			want:  overlaps{},
			stats: map[WorkerID]WorkerStats{"a": {}},
		},
		{
			name: "repeated_hash_in_long_list_skipped", spec: "§3.6",
			steps: []step{{w: "a", store: &Store{Hashes: longHashes(40, 33), Tokens: make([]uint32, 80), BlockSize: 2, PlainBlocks: 40},
				want: StoreResult{Skip: SkipDuplicateHash}}},
			want: overlaps{},
		},
		{
			name: "long_list_without_repeats_stored", spec: "§3.6",
			steps: []step{{w: "a", store: &Store{Hashes: longHashes(40, -1), Tokens: make([]uint32, 80), BlockSize: 2, PlainBlocks: 40},
				want: StoreResult{Stored: 40}}},
			query: make([]uint32, 10), want: overlaps{"a": {Worker: "a", GPU: 5}},
		},
		{
			name: "self_referencing_parent_skipped", spec: "§3.6",
			steps: []step{{w: "a", store: gpuStore(0, 1), want: StoreResult{Stored: 1}},
				{w: "a", store: &Store{HasParent: true, Parent: eh0, Hashes: []uint64{eh1, eh0}, Tokens: doc[2:6], BlockSize: 2, PlainBlocks: 2},
					want: StoreResult{Skip: SkipDuplicateHash}}},
			want: overlaps{"a": {Worker: "a", GPU: 1}},
		},
		{
			name: "non_plain_blocks_are_an_excluded_chain", spec: "§4.2 step 5",
			steps: []step{{w: "a", store: func() *Store { s := gpuStore(0, 3); s.PlainBlocks = 1; return s }(), want: StoreResult{Stored: 1}},
				{w: "a", store: gpuStore(3, 4), want: StoreResult{Skip: SkipExcludedChain}}},
			want:  overlaps{"a": {Worker: "a", GPU: 1}},
			stats: map[WorkerID]WorkerStats{"a": {Blocks: [NumMedia]int{3, 0, 0}}},
		},
		{
			name: "removed_excluded_parent_is_parent_not_found", spec: "§4.2 step 5",
			steps: []step{{w: "a", store: func() *Store { s := gpuStore(0, 3); s.PlainBlocks = 0; return s }(), want: StoreResult{}},
				{w: "a", remove: []uint64{eh2}, wantRm: [2]int{1, 0}},
				{w: "a", store: gpuStore(3, 4), want: StoreResult{Skip: SkipParentNotFound}}},
			want:  overlaps{},
			stats: map[WorkerID]WorkerStats{"a": {Blocks: [NumMedia]int{2, 0, 0}}},
		},
		{
			name: "clear_worker_empties_only_that_worker", spec: "§3.3, §8",
			steps: []step{{w: "a", store: gpuStore(0, 4), want: StoreResult{Stored: 4}},
				{w: "b", store: gpuStore(0, 2), want: StoreResult{Stored: 2}},
				{w: "a", clear: true},
				{w: "a", store: gpuStore(2, 4), want: StoreResult{Skip: SkipParentNotFound}}},
			want: overlaps{"b": {Worker: "b", GPU: 2}},
			stats: map[WorkerID]WorkerStats{"a": {Clears: 1},
				"b": {Blocks: [NumMedia]int{2, 0, 0}}},
		},
		{
			name: "remove_worker_drops_all_state", spec: "§1.6 discovery, §8",
			steps: []step{{w: "a", store: gpuStore(0, 4), want: StoreResult{Stored: 4}},
				{w: "b", store: gpuStore(0, 2), want: StoreResult{Stored: 2}},
				{w: "a", drop: true}, {w: "zz", drop: true}, {w: "zz", clear: true}},
			want:  overlaps{"b": {Worker: "b", GPU: 2}},
			stats: map[WorkerID]WorkerStats{"b": {Blocks: [NumMedia]int{2, 0, 0}}},
		},
		{
			name: "cpu_remove_never_removes_gpu", spec: "§3.4, §8",
			steps: []step{{w: "a", store: gpuStore(0, 4), want: StoreResult{Stored: 4}},
				{w: "a", store: placeholder(CPU, 0, 4), want: StoreResult{Stored: 4}},
				{w: "a", remove: []uint64{eh0, eh1, eh2, eh3}, rm: CPU, wantRm: [2]int{4, 0}},
				{w: "a", remove: []uint64{eh0}, rm: Disk, wantRm: [2]int{0, 1}}},
			want:  overlaps{"a": {Worker: "a", GPU: 4}},
			stats: map[WorkerID]WorkerStats{"a": {Blocks: [NumMedia]int{4, 0, 0}}},
		},
		{
			name: "ext_host_and_ext_disk_continue_gpu_prefix", spec: "conditional-disagg.md §1",
			steps: []step{{w: "a", store: gpuStore(0, 4), want: StoreResult{Stored: 4}},
				{w: "a", store: placeholder(CPU, 1, 3), want: StoreResult{Stored: 2}},
				{w: "a", store: placeholder(Disk, 2, 4), want: StoreResult{Stored: 2}},
				{w: "a", remove: []uint64{eh1, eh2, eh3}, wantRm: [2]int{3, 0}}},
			want: overlaps{"a": {Worker: "a", GPU: 1, CPU: 2, Disk: 1}},
		},
		{
			name: "block_on_cpu_and_disk_counts_as_cpu", spec: "conditional-disagg.md §1",
			steps: []step{{w: "a", store: gpuStore(0, 4), want: StoreResult{Stored: 4}},
				{w: "a", store: placeholder(CPU, 0, 4), want: StoreResult{Stored: 4}},
				{w: "a", store: placeholder(Disk, 0, 4), want: StoreResult{Stored: 4}},
				{w: "a", remove: []uint64{eh0, eh1, eh2, eh3}, wantRm: [2]int{4, 0}}},
			want: overlaps{"a": {Worker: "a", CPU: 4}},
		},
		{
			name: "gpu_only_block_ends_the_lower_tier_run", spec: "conditional-disagg.md §1",
			steps: []step{{w: "a", store: gpuStore(0, 4), want: StoreResult{Stored: 4}},
				{w: "a", store: placeholder(CPU, 1, 2), want: StoreResult{Stored: 1}},
				{w: "a", store: placeholder(CPU, 3, 4), want: StoreResult{Stored: 1}},
				{w: "a", remove: []uint64{eh1}, wantRm: [2]int{1, 0}}},
			want: overlaps{"a": {Worker: "a", GPU: 1, CPU: 1}},
		},
		{
			name: "placeholder_without_gpu_source_unresolved", spec: "§3.4",
			steps: []step{{w: "a", store: gpuStore(0, 2), want: StoreResult{Stored: 2}},
				{w: "a", store: placeholder(CPU, 1, 3), want: StoreResult{Skip: SkipUnresolved}}},
			want:  overlaps{"a": {Worker: "a", GPU: 2}},
			stats: map[WorkerID]WorkerStats{"a": {Blocks: [NumMedia]int{2, 0, 0}}},
		},
		{
			name: "self_describing_cpu_store_chains_from_gpu_parent", spec: "§3.4",
			steps: []step{{w: "a", store: gpuStore(0, 2), want: StoreResult{Stored: 2}},
				{w: "a", store: func() *Store { s := gpuStore(2, 4); s.Medium = CPU; return s }(), want: StoreResult{Stored: 2}},
				{w: "b", store: func() *Store { s := gpuStore(0, 4); s.Medium = Disk; return s }(), want: StoreResult{Stored: 4}}},
			want: overlaps{"a": {Worker: "a", GPU: 2, CPU: 2}, "b": {Worker: "b", Disk: 4}},
		},
		{
			name: "short_tokens_index_covered_blocks", spec: "§4.2 step 4",
			steps: []step{{w: "a", store: &Store{Hashes: []uint64{eh0, eh1, eh2}, Tokens: doc[:5], BlockSize: 2, PlainBlocks: 3},
				want: StoreResult{Stored: 2, ShortTokens: true}}},
			want:  overlaps{"a": {Worker: "a", GPU: 2}},
			stats: map[WorkerID]WorkerStats{"a": {Blocks: [NumMedia]int{2, 0, 0}}},
		},
		{
			name: "long_tokens_skipped", spec: "§4.2 step 4",
			steps: []step{{w: "a", store: &Store{Hashes: []uint64{eh0}, Tokens: doc[:3], BlockSize: 2, PlainBlocks: 1},
				want: StoreResult{Skip: SkipTokenMismatch}}},
			want: overlaps{},
		},
		{
			name: "block_size_mismatch_only_with_tokens", spec: "§4.2 step 1",
			steps: []step{{w: "a", store: &Store{Hashes: []uint64{eh0}, Tokens: doc[:4], BlockSize: 4, PlainBlocks: 1},
				want: StoreResult{Skip: SkipBlockSizeMismatch}},
				{w: "a", store: &Store{Hashes: []uint64{eh0}, BlockSize: 4, PlainBlocks: 1},
					want: StoreResult{ShortTokens: true}}},
			want:  overlaps{},
			stats: map[WorkerID]WorkerStats{"a": {}},
		},
		{
			name: "lora_keys_differ_from_base", spec: "§4.6, §8",
			steps: []step{{w: "a", store: func() *Store { s := gpuStore(0, 4); s.LoRA = []byte("sql-lora"); return s }(), want: StoreResult{Stored: 4}},
				{w: "b", store: gpuStore(0, 4), want: StoreResult{Stored: 4}}},
			lora: []byte("sql-lora"),
			want: overlaps{"a": {Worker: "a", GPU: 4}},
		},
		{
			name: "key_backed_by_two_ehs_goes_with_the_last", spec: "§4.3",
			steps: []step{{w: "a", store: gpuStore(0, 1), want: StoreResult{Stored: 1}},
				{w: "a", store: &Store{Hashes: []uint64{777}, Tokens: doc[:2], BlockSize: 2, PlainBlocks: 1}, want: StoreResult{Stored: 1}},
				{w: "a", remove: []uint64{eh0}, wantRm: [2]int{1, 0}},
				{w: "b", store: gpuStore(0, 1), want: StoreResult{Stored: 1}},
				{w: "b", store: &Store{Hashes: []uint64{777}, Tokens: doc[:2], BlockSize: 2, PlainBlocks: 1}, want: StoreResult{Stored: 1}},
				{w: "b", remove: []uint64{eh0, 777}, wantRm: [2]int{2, 0}}},
			want: overlaps{"a": {Worker: "a", GPU: 1}},
		},
		{
			name: "cap_refuses_whole_store", spec: "doc.go Capacity",
			cfg: Config{BlockSize: 2, MaxBlocksPerWorker: 3},
			steps: []step{{w: "a", store: gpuStore(0, 2), want: StoreResult{Stored: 2}},
				{w: "a", store: gpuStore(2, 4), want: StoreResult{Skip: SkipCapacity}},
				{w: "a", store: placeholder(CPU, 0, 2), want: StoreResult{Skip: SkipCapacity}},
				{w: "b", store: gpuStore(0, 3), want: StoreResult{Stored: 3}},
				{w: "a", store: gpuStore(2, 3), want: StoreResult{Stored: 1}}},
			want: overlaps{"a": {Worker: "a", GPU: 3}, "b": {Worker: "b", GPU: 3}},
		},
		{
			name: "more_gpu_entries_than_num_gpu_blocks_clears", spec: "§4.3 sanity check",
			steps: []step{{w: "a", cap: 3}, {w: "a", store: gpuStore(0, 3), want: StoreResult{Stored: 3}},
				{w: "a", store: placeholder(CPU, 0, 3), want: StoreResult{Stored: 3}},
				{w: "a", store: gpuStore(3, 4), want: StoreResult{Stored: 1, CapacityCleared: true}},
				{w: "b", store: gpuStore(0, 4), want: StoreResult{Stored: 4}},
				{w: "b", cap: 2}},
			want: overlaps{},
			stats: map[WorkerID]WorkerStats{"a": {Clears: 1, CapacityClears: 1},
				"b": {Clears: 1, CapacityClears: 1}},
		},
		{
			name: "vector_C_remove_of_block_0_leaves_no_prefix", spec: "vllm-kv-events.md §2.6 C",
			steps: []step{{w: "a", store: &Store{Hashes: []uint64{0xfffffffffffffffe, 5}, Tokens: doc[:4], BlockSize: 2, PlainBlocks: 2},
				want: StoreResult{Stored: 2}},
				{w: "a", remove: []uint64{0xfffffffffffffffe}, wantRm: [2]int{1, 0}}},
			query: doc[:4], want: overlaps{},
			stats: map[WorkerID]WorkerStats{"a": {Blocks: [NumMedia]int{1, 0, 0}}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			if cfg.BlockSize == 0 {
				cfg.BlockSize = 2
			}
			ix, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			for i, st := range tc.steps {
				switch {
				case st.store != nil:
					if got := ix.Store(st.w, st.store); got != st.want {
						t.Fatalf("%s: step %d Store(%s) = %+v, want %+v", tc.spec, i, st.w, got, st.want)
					}
				case st.remove != nil:
					r, n := ix.Remove(st.w, st.rm, st.remove)
					if [2]int{r, n} != st.wantRm {
						t.Fatalf("%s: step %d Remove(%s) = %d, %d, want %v", tc.spec, i, st.w, r, n, st.wantRm)
					}
				case st.clear:
					ix.ClearWorker(st.w)
				case st.drop:
					ix.RemoveWorker(st.w)
				case st.cap > 0:
					ix.SetCapacity(st.w, st.cap)
				}
			}
			q := tc.query
			if q == nil {
				q = doc
			}
			var out Overlaps
			ix.Overlap(Keys(q, 2, tc.lora), &out)
			got := overlaps{}
			for _, o := range out.Workers {
				got[o.Worker] = o
			}
			if !maps.Equal(got, tc.want) {
				t.Errorf("%s: Overlap = %+v, want %+v", tc.spec, got, tc.want)
			}
			for w, want := range tc.stats {
				if st, ok := ix.Stats(w); !ok || st != want {
					t.Errorf("%s: Stats(%s) = %+v, %v, want %+v", tc.spec, w, st, ok, want)
				}
			}
			if tc.stats != nil && len(ix.Workers()) != len(tc.stats) {
				t.Errorf("%s: Workers() = %v, want the %d workers of stats", tc.spec, ix.Workers(), len(tc.stats))
			}
		})
	}
}

// longHashes returns n distinct hashes, with hash dup repeated at the end when dup >= 0.
func longHashes(n, dup int) []uint64 {
	hs := make([]uint64, n)
	for i := range hs {
		hs[i] = uint64(i) * 1000
	}
	if dup >= 0 {
		hs[n-1] = hs[dup]
	}
	return hs
}

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		cfg  Config
		errs []string
	}{
		{Config{BlockSize: 16}, nil},
		{Config{BlockSize: 1, MaxBlocksPerWorker: 1}, nil},
		{Config{}, []string{"block_size=0"}},
		{Config{BlockSize: MaxBlockSize + 1}, []string{"block_size=65537"}},
		{Config{BlockSize: -1, MaxBlocksPerWorker: -5}, []string{"block_size=-1", "max_blocks_per_worker=-5"}},
		{Config{BlockSize: 16, MaxBlocksPerWorker: maxRefs + 1}, []string{"max_blocks_per_worker=536870913"}},
		{Config{BlockSize: 16, Keys: KeysBigram}, nil},
		{Config{BlockSize: 16, Keys: KeysBigram + 1}, []string{"keys=2"}},
	}
	for _, c := range cases {
		ix, err := New(c.cfg)
		if (err == nil) != (c.errs == nil) || (ix == nil) == (err == nil) {
			t.Errorf("New(%+v) = %v, %v; want errors %q", c.cfg, ix, err, c.errs)
			continue
		}
		for _, e := range c.errs {
			if !strings.Contains(err.Error(), e) || !strings.Contains(err.Error(), "kvindex: config") {
				t.Errorf("New(%+v) error %q lacks %q", c.cfg, err, e)
			}
		}
	}
}

func TestSkipReasonLabels(t *testing.T) {
	want := []string{"none", "parent_not_found", "excluded_chain", "block_size_mismatch", "token_mismatch",
		"duplicate_hash", "unresolved", "capacity", "fenced", "key_scheme_mismatch"}
	for r, w := range want {
		if got := SkipReason(r).String(); got != w {
			t.Errorf("SkipReason(%d) = %q, want %q", r, got, w)
		}
	}
	if got := SkipReason(len(want)).String(); got != "unknown" {
		t.Errorf("out-of-range SkipReason = %q", got)
	}
}
