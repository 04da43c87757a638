package kvindex

import (
	"math/rand/v2"
	"slices"
	"testing"
)

type randChooser struct{ r *rand.Rand }

func (c randChooser) intn(n int) int { return c.r.IntN(n) }

// bytesChooser draws decisions from fuzz input; once it is used up every choice is 0.
type bytesChooser struct{ b []byte }

func (c *bytesChooser) intn(n int) int {
	if len(c.b) == 0 {
		return 0
	}
	v := int(c.b[0])
	c.b = c.b[1:]
	if n > 256 && len(c.b) > 0 {
		v = v<<8 | int(c.b[0])
		c.b = c.b[1:]
	}
	return v % n
}

// TestIndexMatchesModel runs random operation sequences against Index and the naive model,
// comparing every result, Overlap on shared-prefix queries, Stats, Workers and NumKeys.
func TestIndexMatchesModel(t *testing.T) {
	for _, tc := range []struct {
		name     string
		B        int
		workers  int
		maxBlock int
		seed     uint64
		steps    int
	}{
		{"few_workers", 2, 3, 0, 1, 3000},
		{"many_workers_two_bitset_words", 2, 70, 0, 2, 1500},
		{"many_workers_four_bitset_words", 2, 200, 0, 7, 1500},
		{"block_size_16", 16, 5, 0, 3, 3000},
		{"tight_cap", 2, 4, 12, 4, 3000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ix, err := New(Config{BlockSize: tc.B, MaxBlocksPerWorker: tc.maxBlock})
			if err != nil {
				t.Fatal(err)
			}
			m := newModel(tc.B, tc.maxBlock)
			g := newOpGen(tc.B, tc.workers)
			c := randChooser{rand.New(rand.NewPCG(tc.seed, 99))}
			qs := g.queries()
			steps := tc.steps
			if testing.Short() {
				steps = 500
			}
			var cov coverage
			for i := range steps {
				desc := g.step(t, c, ix, m, &cov)
				if i%7 == 0 || i == steps-1 {
					compareWithModel(t, ix, m, qs, desc, &cov)
				}
			}
			t.Logf("coverage: %+v", cov)
			// The generator must exercise every case; 500 steps (-short) may miss one, so only a
			// full run fails on it.
			report := t.Errorf
			if testing.Short() {
				report = t.Logf
			}
			for r, n := range cov.skips {
				if n == 0 && (SkipReason(r) != SkipCapacity || tc.maxBlock > 0) {
					report("no Store skipped as %v", SkipReason(r))
				}
			}
			if cov.stored == 0 || cov.short == 0 || cov.gpu == 0 || cov.cpu == 0 || cov.disk == 0 || cov.capClears == 0 ||
				tc.maxBlock == 0 && cov.longest <= lookupChunk || tc.workers > 64 && cov.spilled == 0 {
				report("random run did not exercise every case: %+v", cov)
			}
			for _, w := range g.workers {
				ix.RemoveWorker(w)
			}
			if n := ix.NumKeys(); n != 0 {
				t.Fatalf("after removing every worker NumKeys() = %d, want 0", n)
			}
		})
	}
}

// FuzzIndexOps drives random operation sequences from the fuzz input and checks Index against
// the naive model, and its search against the key-by-key scan, after every operation. An odd
// first byte keeps every event on GPU, so the workers stay searchable (overlap_search.go); a
// first byte with bit 1 set spreads the events over 70 workers, two bitset groups.
func FuzzIndexOps(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19})
	f.Add([]byte("\x00\x00\x05\x00\x00\x02\x00\x00\x00\x01\x00\x0b\x00\x00\x00"))
	r := rand.New(rand.NewPCG(5, 6))
	for range 4 {
		b := make([]byte, 400)
		for i := range b {
			b[i] = byte(r.UintN(256))
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 1024 {
			return
		}
		ix, err := New(Config{BlockSize: 2, MaxBlocksPerWorker: 40})
		if err != nil {
			t.Fatal(err)
		}
		m := newModel(2, 40)
		workers := 3
		if len(data) > 0 && data[0]&2 != 0 {
			workers = 70 // two bitset groups: rows spill and return (rows.go)
		}
		g := newOpGen(2, workers)
		g.gpuOnly = len(data) > 0 && data[0]%2 == 1
		c := &bytesChooser{b: data}
		qs := g.queries()
		var cov coverage
		var out Overlaps
		for i := 0; len(c.b) > 0; i++ {
			desc := g.step(t, c, ix, m, &cov)
			if i%4 == 0 || len(c.b) == 0 {
				compareWithModel(t, ix, m, qs, desc, &cov)
			}
			for qi, q := range qs {
				ix.Overlap(q, &out)
				got := slices.Clone(out.Workers)
				sortOverlaps(got)
				if want := overlapByScan(ix, q); !slices.Equal(got, want) {
					t.Fatalf("%s: query %d: search %+v, scan %+v", desc, qi, got, want)
				}
			}
		}
	})
}
