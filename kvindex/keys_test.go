package kvindex

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/zeebo/xxh3"
)

func TestKeyVectors(t *testing.T) {
	// vllm-kv-events.md §4.6.
	if got := xxh3.HashSeed(nil, 0); got != 0x2d06800538d394c2 {
		t.Errorf("XXH3_64(\"\", 0) = %#x, want 0x2d06800538d394c2", got)
	}
	tokens := []uint32{1, 2, 3, 4}
	if got := localHash(tokens[:2], Seed); got != 0x9581a6bbf9cef45a {
		t.Errorf("local(0) = %#x, want 0x9581a6bbf9cef45a", got)
	}
	if got := localHash(tokens[2:], Seed); got != 0x24f1bf0c78a5ca72 {
		t.Errorf("local(1) = %#x, want 0x24f1bf0c78a5ca72", got)
	}
	want := []uint64{0x9581a6bbf9cef45a, 0x51bdd8da9da7a8e2}
	if got := Keys(tokens, 2, nil); !slices.Equal(got, want) {
		t.Errorf("Keys([1 2 3 4], 2, nil) = %#x, want %#x", got, want)
	}
	if got := Keys([]uint32{1, 2, 3, 4, 5}, 2, []byte{}); !slices.Equal(got, want) {
		t.Errorf("Keys with a partial tail and empty LoRA = %#x, want %#x", got, want)
	}
	if got := xxh3.HashSeed([]byte("sql-lora"), 0); got != 0x8b43147fe6fe0aa1 {
		t.Errorf("XXH3_64(\"sql-lora\", 0) = %#x, want 0x8b43147fe6fe0aa1", got)
	}
	if got := LoRASeed([]byte("sql-lora")); got != 0x8b43147fe6fe0fda {
		t.Errorf("LoRASeed(sql-lora) = %#x, want 0x8b43147fe6fe0fda", got)
	}
	if got := LoRASeed(nil); got != Seed {
		t.Errorf("LoRASeed(nil) = %d, want %d", got, Seed)
	}
}

func TestLoRAKeysDiffer(t *testing.T) {
	tokens := []uint32{1, 2, 3, 4}
	base := Keys(tokens, 2, nil)
	lora := Keys(tokens, 2, []byte("sql-lora"))
	seed := LoRASeed([]byte("sql-lora"))
	// The LoRA seed applies to the local hashes; chaining stays on Seed.
	k0 := localHash(tokens[:2], seed)
	want := []uint64{k0, xxh3.HashSeed(le64pair(k0, localHash(tokens[2:], seed)), Seed)}
	if !slices.Equal(lora, want) {
		t.Errorf("LoRA keys = %#x, want %#x", lora, want)
	}
	for i := range base {
		if base[i] == lora[i] {
			t.Errorf("key %d equal with and without LoRA: %#x", i, base[i])
		}
	}
}

func le64pair(a, b uint64) []byte {
	var buf [16]byte
	for i := range 8 {
		buf[i] = byte(a >> (8 * i))
		buf[8+i] = byte(b >> (8 * i))
	}
	return buf[:]
}

func TestAppendKeysChainsAcrossCalls(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, B := range []int{1, 2, 16, 64, 100} {
		tokens := make([]uint32, 37*B+B/2)
		for i := range tokens {
			tokens[i] = r.Uint32()
		}
		for _, lora := range [][]byte{nil, []byte("sql-lora")} {
			t.Run(fmt.Sprintf("B=%d/lora=%q", B, lora), func(t *testing.T) {
				all := Keys(tokens, B, lora)
				if len(all) != 37 {
					t.Fatalf("len(Keys) = %d, want 37", len(all))
				}
				for cut := 0; cut <= 37; cut += 5 {
					got := AppendKeys(nil, 0, tokens[:cut*B], B, lora)
					var parent uint64
					if cut > 0 {
						parent = got[cut-1]
					}
					got = AppendKeys(got, parent, tokens[cut*B:], B, lora)
					if !slices.Equal(got, all) {
						t.Fatalf("split at block %d: keys differ from Keys", cut)
					}
				}
			})
		}
	}
}

func TestLocalHashPortable(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{0, 1, 2, 16, 63, 64, 65, 200, 1000} {
		block := make([]uint32, n)
		for i := range block {
			block[i] = r.Uint32()
		}
		seed := r.Uint64()
		if a, b := localHash(block, seed), localHashPortable(block, seed); a != b {
			t.Errorf("n=%d: localHash %#x != portable %#x", n, a, b)
		}
	}
}

func TestAppendKeysNoAlloc(t *testing.T) {
	tokens := make([]uint32, 32*16)
	dst := make([]uint64, 0, 32)
	lora := []byte("sql-lora")
	allocs := testing.AllocsPerRun(100, func() {
		dst = AppendKeys(dst[:0], 0, tokens, 16, lora)
	})
	if allocs != 0 {
		t.Errorf("AppendKeys allocated %.1f times per call, want 0", allocs)
	}
}

func TestKeysEdgeCases(t *testing.T) {
	if got := Keys([]uint32{1, 2, 3}, 0, nil); got != nil {
		t.Errorf("block size 0: %v, want nil", got)
	}
	if got := Keys([]uint32{1}, 2, nil); got != nil {
		t.Errorf("partial block only: %v, want nil", got)
	}
	if got := AppendKeys([]uint64{7}, 0, []uint32{1, 2}, -1, nil); !slices.Equal(got, []uint64{7}) {
		t.Errorf("negative block size appended: %v", got)
	}
}

// TestSaltedKeys: a cache_salt changes block 0's key and so every key chained after it; the
// same salt gives the same keys, and a store with that salt in block 0 matches a request with
// it (and only that request).
func TestSaltedKeys(t *testing.T) {
	toks := make([]uint32, 64)
	for i := range toks {
		toks[i] = uint32(100 + i)
	}
	plain := AppendRequestKeys(nil, toks, 16, nil, nil)
	a := AppendRequestKeys(nil, toks, 16, nil, []byte("tenant-a"))
	b := AppendRequestKeys(nil, toks, 16, nil, []byte("tenant-b"))
	if len(a) != 4 || !slicesEqual(plain, Keys(toks, 16, nil)) {
		t.Fatalf("keys %v / %v", plain, a)
	}
	for i := range a {
		if a[i] == plain[i] || a[i] == b[i] {
			t.Fatalf("block %d: salted key equals another salt's or the plain one", i)
		}
	}
	if !slicesEqual(a, AppendRequestKeys(nil, toks, 16, nil, []byte("tenant-a"))) {
		t.Fatal("the same salt gave other keys")
	}
	ix, err := New(Config{BlockSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	hashes := []uint64{1, 2, 3, 4}
	if r := ix.Store("w", &Store{Medium: GPU, Hashes: hashes, Tokens: toks, BlockSize: 16, PlainBlocks: 4, Salt: []byte("tenant-a")}); r.Skip != SkipNone {
		t.Fatal(r.Skip)
	}
	var out Overlaps
	for _, c := range []struct {
		keys []uint64
		want int
	}{{a, 4}, {b, 0}, {plain, 0}} {
		ix.Overlap(c.keys, &out)
		got := 0
		if len(out.Workers) == 1 {
			got = out.Workers[0].GPU
		}
		if got != c.want {
			t.Fatalf("overlap %d, want %d", got, c.want)
		}
	}
}

func slicesEqual(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestReportModeRestoreIsIdempotent: vLLM's kv_cache_report_mode "full" re-announces cache hits
// as a parentless BlockStored of blocks the worker already holds; those add no reference, so
// the one BlockRemoved per block the engine sends on eviction removes them. A second physical
// copy (a recomputed last block, stored with its parent) still counts, as vLLM removes each
// copy on its own.
func TestReportModeRestoreIsIdempotent(t *testing.T) {
	toks := []uint32{1, 2, 3, 4, 5, 6}
	ix, err := New(Config{BlockSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	gpu := func() int {
		var out Overlaps
		ix.Overlap(Keys(toks, 2, nil), &out)
		if len(out.Workers) == 0 {
			return 0
		}
		return out.Workers[0].GPU
	}
	chain := &Store{Medium: GPU, Hashes: []uint64{11, 12, 13}, Tokens: toks, BlockSize: 2, PlainBlocks: 3}
	for range 3 { // stored once, re-reported twice
		if r := ix.Store("w", chain); r.Skip != SkipNone {
			t.Fatal(r.Skip)
		}
	}
	ix.Remove("w", GPU, []uint64{13})
	if got := gpu(); got != 2 {
		t.Fatalf("after evicting block 2 once: %d blocks credited, want 2", got)
	}
	// The last block recomputed and stored again with its parent: a real second copy.
	copy2 := &Store{Medium: GPU, Hashes: []uint64{13}, Parent: 12, HasParent: true, Tokens: toks[4:], BlockSize: 2, PlainBlocks: 1}
	ix.Store("w", copy2)
	ix.Store("w", copy2)
	ix.Remove("w", GPU, []uint64{13})
	if got := gpu(); got != 3 {
		t.Fatalf("one of two copies evicted: %d blocks, want 3", got)
	}
	ix.Remove("w", GPU, []uint64{11, 12, 13})
	if got := gpu(); got != 0 {
		t.Fatalf("every block evicted once: %d blocks still credited", got)
	}
}
