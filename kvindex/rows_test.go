package kvindex

import (
	"fmt"
	"slices"
	"testing"
)

// TestGPURowSpills follows one key row through the GPU representations of rows.go at 130
// workers (three 64-slot groups): inline while its holders share a group, spilled to a dense
// bitset when a second group holds it, inline again when removals leave one group, and the
// dense bitset reused by the next spill. Overlap must report the same holders throughout.
func TestGPURowSpills(t *testing.T) {
	ix, err := New(Config{BlockSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]WorkerID, 130)
	for i := range ids {
		ids[i] = WorkerID(fmt.Sprintf("w%03d", i))
		ix.SetCapacity(ids[i], 0) // slot i
	}
	keys := Keys(doc, 2, nil)
	row := func() (group uint32, inline bool) {
		t.Helper()
		r, ok := ix.keys.find(keys[0])
		if !ok {
			t.Fatal("key 0 has no row")
		}
		g, _, ok := ix.keys.inline(r)
		return g, ok
	}
	holders := func(want ...int) {
		t.Helper()
		var out Overlaps
		ix.Overlap(keys, &out)
		var got []int
		for _, o := range out.Workers {
			if o.GPU != 4 {
				t.Fatalf("%s: %d GPU blocks, want 4", o.Worker, o.GPU)
			}
			var i int
			fmt.Sscanf(string(o.Worker), "w%03d", &i)
			got = append(got, i)
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("holders %v, want %v", got, want)
		}
	}
	store := func(i int) {
		t.Helper()
		if res := ix.Store(ids[i], gpuStore(0, 4)); res.Stored != 4 {
			t.Fatalf("store on %s: %+v", ids[i], res)
		}
	}
	remove := func(i int) {
		t.Helper()
		if n, _ := ix.Remove(ids[i], GPU, []uint64{eh3, eh2, eh1, eh0}); n != 4 {
			t.Fatalf("remove on %s removed %d", ids[i], n)
		}
	}

	store(0)
	store(63)
	if g, in := row(); !in || g != 0 {
		t.Fatalf("held by slots 0 and 63: inline %v group %d, want inline group 0", in, g)
	}
	holders(0, 63)
	store(70)
	if _, in := row(); in {
		t.Fatal("held in groups 0 and 1: still inline")
	}
	store(129)
	holders(0, 63, 70, 129)
	dense := len(ix.keys.dense)
	if dense != 4*ix.keys.words {
		t.Fatalf("4 rows spilled: dense has %d words, want %d", dense, 4*ix.keys.words)
	}
	remove(0)
	remove(63)
	if _, in := row(); in {
		t.Fatal("held in groups 1 and 2: inline")
	}
	remove(70)
	if g, in := row(); !in || g != 2 {
		t.Fatalf("held by slot 129 alone: inline %v group %d, want inline group 2", in, g)
	}
	holders(129)
	if got := len(ix.keys.denseFree); got != 4 {
		t.Fatalf("%d dense bitsets free, want 4", got)
	}
	store(1)
	holders(1, 129)
	if got := len(ix.keys.dense); got != dense {
		t.Fatalf("the second spill grew dense to %d words from %d: free bitsets not reused", got, dense)
	}
	remove(1)
	remove(129)
	if ix.NumKeys() != 0 {
		t.Fatalf("NumKeys() = %d after every remove", ix.NumKeys())
	}
}

// TestOneGroupRowsStayInline: at 1,024 workers, keys each held by workers of a single 64-slot
// group take no dense bitset (the memory rows.go saves against a dense row per key).
func TestOneGroupRowsStayInline(t *testing.T) {
	ix, err := New(Config{BlockSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 1024 {
		w := WorkerID(fmt.Sprintf("w%04d", i))
		tokens := []uint32{uint32(i / 64), 1, uint32(i), 3, 4, 5} // block 0 shared by the group's 64 workers
		s := &Store{BlockSize: 2, Tokens: tokens, PlainBlocks: 3, Hashes: []uint64{uint64(3 * i), uint64(3*i + 1), uint64(3*i + 2)}}
		if res := ix.Store(w, s); res.Stored != 3 {
			t.Fatalf("store on %s: %+v", w, res)
		}
	}
	if ix.keys.words != 16 {
		t.Fatalf("%d bitset words, want 16", ix.keys.words)
	}
	if n := len(ix.keys.dense); n != 0 {
		t.Fatalf("dense holds %d words for rows held in one group each", n)
	}
	if got, want := ix.NumKeys(), 16+2*1024; got != want {
		t.Fatalf("NumKeys() = %d, want %d", got, want)
	}
	var out Overlaps
	ix.Overlap(Keys([]uint32{5, 1, 5*64 + 7, 3}, 2, nil), &out)
	if len(out.Workers) != 64 {
		t.Fatalf("group 5's shared block: %d holders, want 64", len(out.Workers))
	}
	for _, o := range out.Workers {
		if want := 1 + btoi(o.Worker == "w0327"); o.GPU != want {
			t.Fatalf("%s: %d GPU blocks, want %d", o.Worker, o.GPU, want)
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
