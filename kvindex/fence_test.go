package kvindex

import "testing"

// TestFence: the reset window of fence.go, one case per ordering of the router's reset, the
// engine's late AllBlocksCleared (ClearWorker) and the stale stores emitted before the reset.
func TestFence(t *testing.T) {
	type op struct {
		fence, clearFenced, unfence bool // on the worker's current fence (the last Fence)
		older                       bool // clearFenced/unfence name the fence before the last
		clear                       bool // the engine's AllBlocksCleared
		store                       *Store
		want                        StoreResult
		remove                      []uint64
		wantOK                      bool // clearFenced / unfence result
	}
	cases := []struct {
		name, spec string
		ops        []op
		gpu        int  // Overlap of doc on GPU afterwards
		fenced     bool // WorkerStats.Fenced afterwards
	}{
		{name: "stale_store_after_reset_is_refused", spec: "fence.go: batches before the engine's clear predate the reset",
			ops: []op{{store: gpuStore(0, 2), want: StoreResult{Stored: 2}}, {fence: true}, {clearFenced: true, wantOK: true},
				{store: gpuStore(0, 4), want: StoreResult{Skip: SkipFenced}}},
			gpu: 0, fenced: true},
		{name: "engine_clear_lifts_the_fence_and_later_stores_apply", spec: "fence.go: AllBlocksCleared then the step's own stores",
			ops: []op{{store: gpuStore(0, 2), want: StoreResult{Stored: 2}}, {fence: true}, {clearFenced: true, wantOK: true},
				{clear: true}, {store: gpuStore(0, 3), want: StoreResult{Stored: 3}}},
			gpu: 3},
		{name: "engine_clear_before_clearFenced_keeps_the_new_stores", spec: "fence.go: the clear can win the race with the reset's answer",
			ops: []op{{store: gpuStore(0, 4), want: StoreResult{Stored: 4}}, {fence: true}, {clear: true},
				{store: gpuStore(0, 1), want: StoreResult{Stored: 1}}, {clearFenced: true, wantOK: false}},
			gpu: 1},
		{name: "failed_reset_unfences_and_keeps_entries", spec: "fence.go: the engine refused the reset",
			ops: []op{{store: gpuStore(0, 2), want: StoreResult{Stored: 2}}, {fence: true},
				{store: gpuStore(2, 3), want: StoreResult{Skip: SkipFenced}}, {unfence: true, wantOK: true},
				{store: gpuStore(2, 3), want: StoreResult{Stored: 1}}},
			gpu: 3},
		{name: "removes_apply_while_fenced", spec: "fence.go: only stores are refused",
			ops: []op{{store: gpuStore(0, 3), want: StoreResult{Stored: 3}}, {fence: true}, {remove: []uint64{eh2}}},
			gpu: 2, fenced: true},
		{name: "an_older_fence_cannot_lift_or_clear_a_newer_one", spec: "fence.go: FenceID",
			ops: []op{{store: gpuStore(0, 2), want: StoreResult{Stored: 2}}, {fence: true}, {fence: true},
				{unfence: true, older: true, wantOK: false}, {clearFenced: true, older: true, wantOK: false},
				{store: gpuStore(2, 3), want: StoreResult{Skip: SkipFenced}}},
			gpu: 2, fenced: true},
		{name: "unfence_after_the_engine_clear_does_nothing", spec: "fence.go: the clear already lifted it",
			ops: []op{{fence: true}, {clear: true}, {unfence: true, wantOK: false}, {store: gpuStore(0, 1), want: StoreResult{Stored: 1}}},
			gpu: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ix, err := New(Config{BlockSize: 2})
			if err != nil {
				t.Fatal(err)
			}
			var fences []FenceID
			pick := func(o op) FenceID {
				if o.older {
					return fences[len(fences)-2]
				}
				return fences[len(fences)-1]
			}
			for i, o := range tc.ops {
				switch {
				case o.fence:
					fences = append(fences, ix.Fence("a"))
				case o.clearFenced:
					if got := ix.ClearFenced("a", pick(o)); got != o.wantOK {
						t.Fatalf("%s: op %d ClearFenced = %v, want %v", tc.spec, i, got, o.wantOK)
					}
				case o.unfence:
					if got := ix.Unfence("a", pick(o)); got != o.wantOK {
						t.Fatalf("%s: op %d Unfence = %v, want %v", tc.spec, i, got, o.wantOK)
					}
				case o.clear:
					ix.Update(func(tx Tx) { tx.ClearWorker("a") })
				case o.store != nil:
					if got := ix.Store("a", o.store); got != o.want {
						t.Fatalf("%s: op %d Store = %+v, want %+v", tc.spec, i, got, o.want)
					}
				case o.remove != nil:
					ix.Remove("a", GPU, o.remove)
				}
			}
			var out Overlaps
			ix.Overlap(Keys(doc, 2, nil), &out)
			gpu := 0
			for _, w := range out.Workers {
				if w.Worker == "a" {
					gpu = w.GPU
				}
			}
			if gpu != tc.gpu {
				t.Errorf("%s: GPU overlap %d, want %d", tc.spec, gpu, tc.gpu)
			}
			st, _ := ix.Stats("a")
			if st.Fenced != tc.fenced || ix.Fenced("a") != tc.fenced {
				t.Errorf("%s: fenced %v / %v, want %v", tc.spec, st.Fenced, ix.Fenced("a"), tc.fenced)
			}
		})
	}
}
