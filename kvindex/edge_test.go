package kvindex

import "testing"

// TestEdgeInputs covers inputs a careful caller never sends: they must not panic and must
// behave as documented.
func TestEdgeInputs(t *testing.T) {
	ix, err := New(Config{BlockSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := ix.Stats("nobody"); ok {
		t.Error("Stats of an unknown worker reported ok")
	}
	// An event without hashes (or none at all) only registers the worker.
	if res := ix.Store("a", nil); res != (StoreResult{}) {
		t.Errorf("Store(nil) = %+v", res)
	}
	if res := ix.Store("b", &Store{Tokens: doc[:2], BlockSize: 2}); res != (StoreResult{}) {
		t.Errorf("Store without hashes = %+v", res)
	}
	if got := ix.Workers(); len(got) != 2 {
		t.Errorf("Workers() = %v, want a and b", got)
	}
	// A Medium out of range is treated as Disk, for stores and removes alike.
	ix.Store("a", gpuStore(0, 2))
	if res := ix.Store("a", placeholder(Medium(9), 0, 2)); res.Stored != 2 {
		t.Errorf("placeholder in Medium(9) = %+v", res)
	}
	if st, _ := ix.Stats("a"); st.Blocks != [NumMedia]int{2, 0, 2} {
		t.Errorf("Blocks = %v, want the Medium(9) store on Disk", st.Blocks)
	}
	if r, n := ix.Remove("a", Medium(200), []uint64{eh0, eh1}); r != 2 || n != 0 {
		t.Errorf("Remove in Medium(200) = %d, %d, want 2, 0", r, n)
	}
	if st, _ := ix.Stats("a"); st.Blocks != [NumMedia]int{2, 0, 0} {
		t.Errorf("Blocks = %v after the Disk remove", st.Blocks)
	}
}

// TestThreeHashesBackOneKey: the presence of a key backed by three EHs goes with the last.
func TestThreeHashesBackOneKey(t *testing.T) {
	ix, err := New(Config{BlockSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	keys := Keys(doc[:2], 2, nil)
	for _, eh := range []uint64{1, 2, 3} {
		ix.Store("a", &Store{Hashes: []uint64{eh}, Tokens: doc[:2], BlockSize: 2, PlainBlocks: 1})
	}
	var out Overlaps
	for i, eh := range []uint64{2, 1, 3} {
		ix.Overlap(keys, &out)
		if len(out.Workers) != 1 || out.Workers[0].GPU != 1 {
			t.Fatalf("before removing EH %d: overlap %+v, want GPU 1", eh, out.Workers)
		}
		ix.Remove("a", GPU, []uint64{eh})
		if i < 2 && ix.NumKeys() != 1 {
			t.Fatalf("key dropped with %d backing EHs left", 2-i)
		}
	}
	ix.Overlap(keys, &out)
	if len(out.Workers) != 0 || ix.NumKeys() != 0 {
		t.Errorf("after the last remove: overlap %+v, %d keys", out.Workers, ix.NumKeys())
	}
}
