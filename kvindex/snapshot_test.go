package kvindex

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

// importInto exports ix and imports it into a new index with cfg, carrying over what a
// snapshot deliberately leaves out (each replica learns num_gpu_blocks itself) and zeroing the
// model's clear counters, which a new index starts again.
func importInto(t testing.TB, ix *Index, m *model, cfg Config) *Index {
	t.Helper()
	snap, st, err := ix.Export(0)
	if err != nil {
		t.Fatal(err)
	}
	ix2, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for w, mw := range m.workers {
		ix2.SetCapacity(w, mw.numGPUBlocks)
		mw.clears, mw.capClears = 0, 0
	}
	got, err := ix2.Import(snap)
	if err != nil {
		t.Fatalf("import of a fresh export: %v", err)
	}
	if got.Workers != st.Workers || got.Keys != st.Keys || got.Entries != st.Entries || got.Bytes != st.Bytes {
		t.Fatalf("import stats %+v, export stats %+v", got, st)
	}
	return ix2
}

// TestSnapshotRoundTrip: an imported index answers every lookup, Stats, Workers and NumKeys as
// the exported one, and then keeps matching the reference model under further random events,
// so refcounts, extra backings, row links and closed states survived the copy.
func TestSnapshotRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name    string
		workers int
		seed    uint64
		gpuOnly bool
	}{
		{"few_workers_all_media", 3, 11, false},
		{"few_workers_gpu_searchable", 3, 12, true},
		{"two_bitset_groups", 70, 13, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{BlockSize: 2}
			ix, _ := New(cfg)
			m := newModel(2, 0)
			g := newOpGen(2, tc.workers)
			g.gpuOnly = tc.gpuOnly
			c := randChooser{rand.New(rand.NewPCG(tc.seed, 3))}
			qs := g.queries()
			var cov coverage
			for round := range 6 {
				for range 400 {
					g.step(t, c, ix, m, &cov)
				}
				ix = importInto(t, ix, m, cfg)
				compareWithModel(t, ix, m, qs, "after import", &cov)
				if round == 5 {
					for range 400 {
						desc := g.step(t, c, ix, m, &cov)
						compareWithModel(t, ix, m, qs, "after import: "+desc, &cov)
					}
				}
			}
			if cov.gpu == 0 || (!tc.gpuOnly && cov.cpu == 0) {
				t.Fatalf("run did not exercise the tiers: %+v", cov)
			}
		})
	}
}

// TestSnapshotPositionAndFence: positions travel with the snapshot, a clear drops one, a
// fenced worker arrives fenced, and an export is refused past its byte limit.
func TestSnapshotPositionAndFence(t *testing.T) {
	cfg := Config{BlockSize: 2}
	ix, _ := New(cfg)
	ix.Update(func(tx Tx) {
		tx.Store("a", gpuStore(0, 3))
		tx.SetPosition("a", Position{Seq: 41, Digest: 0xfeed, Valid: true})
	})
	ix.Store("b", gpuStore(0, 2))
	ix.SetPosition("b", Position{Seq: 7, Digest: 1, Valid: true})
	ix.Update(func(tx Tx) { tx.ClearWorker("b") })
	ix.Store("c", gpuStore(0, 1))
	ix.SetPosition("c", Position{Seq: 3, Valid: true})
	f := ix.Fence("c")
	ix.ClearFenced("c", f)
	if p := ix.Position("c"); !p.Valid || p.Seq != 3 {
		t.Fatalf("a fenced clear dropped the position: %+v", p)
	}
	if _, _, err := ix.Export(20); !errors.Is(err, ErrSnapshotTooLarge) {
		t.Fatalf("Export(20) = %v, want ErrSnapshotTooLarge", err)
	}
	snap, _, err := ix.Export(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	ix2, _ := New(cfg)
	if _, err := ix2.Import(snap); err != nil {
		t.Fatal(err)
	}
	if p := ix2.Position("a"); p != (Position{Seq: 41, Digest: 0xfeed, Valid: true}) {
		t.Fatalf("Position(a) = %+v", p)
	}
	if p := ix2.Position("b"); p.Valid {
		t.Fatalf("Position(b) after its clear = %+v, want none", p)
	}
	if !ix2.Fenced("c") || ix.Fenced("a") {
		t.Fatal("fence did not travel with the snapshot")
	}
	if r := ix2.Store("c", gpuStore(0, 1)); r.Skip != SkipFenced {
		t.Fatalf("store into an imported fenced worker: %+v", r)
	}
	if _, err := ix2.Import(snap); !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("second import = %v, want ErrNotEmpty", err)
	}
	ix3, _ := New(Config{BlockSize: 16})
	if _, err := ix3.Import(snap); err == nil || !strings.Contains(err.Error(), "block size 2 differs") {
		t.Fatalf("import with another block size = %v", err)
	}
}

// TestSnapshotRejects names what is wrong with damaged snapshots and leaves the index empty.
func TestSnapshotRejects(t *testing.T) {
	cfg := Config{BlockSize: 2}
	ix, _ := New(cfg)
	ix.Store("a", gpuStore(0, 3))
	snap, _, _ := ix.Export(0)
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "magic"},
		{"version", append([]byte("cdkvix\x02"), snap[7:]...), "version 2"},
		{"truncated", snap[:len(snap)-3], "kvindex: import: byte"},
		{"trailing", append(bytes.Clone(snap), 0), "trailing"},
		{"forged_count", append([]byte("cdkvix\x01\x02"), 0xff, 0xff, 0xff, 0x7f), "remaining bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ix2, _ := New(cfg)
			_, err := ix2.Import(tc.data)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Import = %v, want an error containing %q", err, tc.want)
			}
			if len(ix2.Workers()) != 0 || ix2.NumKeys() != 0 {
				t.Fatal("a rejected import changed the index")
			}
		})
	}
}

// FuzzSnapshotImport: any input is rejected with an error or imported into an index whose
// invariants hold (row representation, re-export imports again with the same blocks, fences
// and positions; removing every worker leaves no key); allocation stays bounded by the input
// size through the count checks. Lookups on an import must not panic; that they match a scan
// is checked on genuine exports (TestSnapshotRoundTrip), since Import trusts the row links an
// authenticated peer sends. Seeds are exports of random indexes.
func FuzzSnapshotImport(f *testing.F) {
	for seed := range uint64(4) {
		ix, _ := New(Config{BlockSize: 2, MaxBlocksPerWorker: 40})
		m := newModel(2, 40)
		g := newOpGen(2, 3)
		c := randChooser{rand.New(rand.NewPCG(seed, 8))}
		var cov coverage
		for range 60 {
			g.step(f, c, ix, m, &cov)
		}
		snap, _, _ := ix.Export(0)
		f.Add(snap)
	}
	g := newOpGen(2, 3)
	qs := g.queries()
	f.Fuzz(func(t *testing.T, data []byte) {
		ix, _ := New(Config{BlockSize: 2, MaxBlocksPerWorker: 40})
		if _, err := ix.Import(data); err != nil {
			return
		}
		var out Overlaps
		for _, q := range qs {
			ix.Overlap(q, &out)
		}
		checkGPURows(t, ix, "fuzz import")
		again, _, err := ix.Export(0)
		if err != nil {
			t.Fatal(err)
		}
		ix2, _ := New(Config{BlockSize: 2, MaxBlocksPerWorker: 40})
		if _, err := ix2.Import(again); err != nil {
			t.Fatalf("re-export does not import: %v", err)
		}
		if ix2.NumKeys() != ix.NumKeys() {
			t.Fatalf("re-import NumKeys %d, want %d", ix2.NumKeys(), ix.NumKeys())
		}
		for _, w := range ix.Workers() {
			a, _ := ix.Stats(w)
			b, _ := ix2.Stats(w)
			if a.Blocks != b.Blocks || a.Fenced != b.Fenced || ix.Position(w) != ix2.Position(w) {
				t.Fatalf("worker %s: re-import %+v %+v, want %+v %+v", w, b, ix2.Position(w), a, ix.Position(w))
			}
		}
		for _, w := range ix.Workers() {
			ix.RemoveWorker(w)
		}
		if n := ix.NumKeys(); n != 0 {
			t.Fatalf("after removing every imported worker NumKeys() = %d", n)
		}
	})
}
