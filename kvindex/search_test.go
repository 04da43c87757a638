package kvindex

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// overlapByScan is Overlap with every worker scanned key by key: the structure before the
// search existed, used as the oracle of the search.
func overlapByScan(ix *Index, keys []uint64) []WorkerOverlap {
	ix.mu.Lock()
	saved := slices.Clone(ix.fast)
	clear(ix.fast)
	ix.mu.Unlock()
	var out Overlaps
	ix.Overlap(keys, &out)
	ix.mu.Lock()
	copy(ix.fast, saved)
	ix.mu.Unlock()
	got := slices.Clone(out.Workers)
	sortOverlaps(got)
	return got
}

// searchCoverage counts what the random runs exercised of the search.
type searchCoverage struct {
	searched, unclosed, mixed int
}

// TestSearchMatchesScan runs random GPU-heavy operation sequences (stores, removes that leave
// holes, clears, worker removals, capacity clears) and checks after every step that Overlap,
// which searches the closed workers, equals the key-by-key scan of every worker and the model.
func TestSearchMatchesScan(t *testing.T) {
	for _, tc := range []struct {
		name          string
		B, workers    int
		gpuOnly       bool
		seed          uint64
		steps, blocks int
	}{
		{"gpu_only_few_workers", 2, 3, true, 11, 3000, 0},
		{"gpu_only_70_workers", 2, 70, true, 12, 1500, 0},
		{"mixed_media", 2, 6, false, 13, 3000, 0},
		{"gpu_only_block_size_16", 16, 5, true, 14, 2000, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ix, err := New(Config{BlockSize: tc.B})
			if err != nil {
				t.Fatal(err)
			}
			m := newModel(tc.B, 0)
			g := newOpGen(tc.B, tc.workers)
			g.gpuOnly = tc.gpuOnly
			c := randChooser{rand.New(rand.NewPCG(tc.seed, 7))}
			qs := g.queries()
			steps := tc.steps
			if testing.Short() {
				steps /= 5
			}
			var cov coverage
			var sc searchCoverage
			var out Overlaps
			for i := range steps {
				desc := g.step(t, c, ix, m, &cov)
				sc.count(ix)
				for qi, q := range qs {
					ix.Overlap(q, &out)
					got := slices.Clone(out.Workers)
					sortOverlaps(got)
					if want := overlapByScan(ix, q); !slices.Equal(got, want) {
						t.Fatalf("step %d (%s): query %d: search %+v, scan %+v", i, desc, qi, got, want)
					}
					if want := m.overlap(q); !slices.Equal(got, want) {
						t.Fatalf("step %d (%s): query %d: got %+v, model %+v", i, desc, qi, got, want)
					}
				}
			}
			t.Logf("search coverage (worker-steps): %+v", sc)
			if sc.searched == 0 || sc.unclosed == 0 {
				t.Errorf("random run did not exercise both searched and unclosed workers: %+v", sc)
			}
		})
	}
}

func (sc *searchCoverage) count(ix *Index) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	for _, wk := range ix.slots {
		switch {
		case wk == nil:
		case ix.fast[wk.slot/64]&(1<<(wk.slot%64)) != 0:
			sc.searched++
		case wk.unclosed:
			sc.unclosed++
		default:
			sc.mixed++
		}
	}
}

// TestSearchHoleOpensWorker: a worker that drops a key while holding its child is no longer
// searched, so its overlap stops at the hole; a clear makes it searchable again.
func TestSearchHoleOpensWorker(t *testing.T) {
	ix, _ := New(Config{BlockSize: 1})
	tokens := []uint32{1, 2, 3, 4, 5, 6}
	keys := Keys(tokens, 1, nil)
	ehs := []uint64{101, 102, 103, 104, 105, 106}
	ix.Store("w", &Store{Hashes: ehs, Tokens: tokens, BlockSize: 1, PlainBlocks: 6})
	check := func(spec string, wantGPU int, wantSearched bool) {
		t.Helper()
		var out Overlaps
		ix.Overlap(keys, &out)
		got := 0
		if len(out.Workers) == 1 {
			got = out.Workers[0].GPU
		}
		searched := ix.fast[0]&1 != 0
		if got != wantGPU || searched != wantSearched {
			t.Errorf("%s: GPU overlap %d searched %v, want %d %v", spec, got, searched, wantGPU, wantSearched)
		}
	}
	check("whole chain", 6, true)
	ix.Remove("w", GPU, []uint64{106})
	check("tail removed: still closed", 5, true)
	ix.Remove("w", GPU, []uint64{103})
	check("middle removed while its child is held: opened, overlap stops at the hole", 2, false)
	ix.ClearWorker("w")
	ix.Store("w", &Store{Hashes: ehs[:4], Tokens: tokens[:4], BlockSize: 1, PlainBlocks: 4})
	check("after a clear: closed again", 4, true)
}

func ExampleIndex_Overlap_search() {
	ix, _ := New(Config{BlockSize: 2})
	sys := []uint32{1, 2, 3, 4, 5, 6, 7, 8}
	for w, tail := range []uint32{9, 10} {
		tokens := append(slices.Clone(sys), tail, tail)
		ix.Store(WorkerID(fmt.Sprint("w", w)), &Store{Hashes: []uint64{uint64(w*10 + 1), uint64(w*10 + 2), uint64(w*10 + 3), uint64(w*10 + 4), uint64(w*10 + 5)},
			Tokens: tokens, BlockSize: 2, PlainBlocks: 5})
	}
	var out Overlaps
	ix.Overlap(Keys(append(slices.Clone(sys), 10, 10, 11, 11), 2, nil), &out)
	sortOverlaps(out.Workers)
	fmt.Println(out.Workers)
	// Output: [{w0 4 0 0} {w1 5 0 0}]
}
