package kvindex

import "testing"

func TestSmokeStoreOverlap(t *testing.T) {
	ix, err := New(Config{BlockSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	res := ix.Store("w1", &Store{Hashes: []uint64{10, 11}, Tokens: []uint32{1, 2, 3, 4}, BlockSize: 2, PlainBlocks: 2})
	if res != (StoreResult{Stored: 2}) {
		t.Fatalf("store: %+v", res)
	}
	var out Overlaps
	ix.Overlap(Keys([]uint32{1, 2, 3, 4, 5, 6}, 2, nil), &out)
	if len(out.Workers) != 1 || out.Workers[0] != (WorkerOverlap{Worker: "w1", GPU: 2}) {
		t.Fatalf("overlap: %+v", out.Workers)
	}
}
