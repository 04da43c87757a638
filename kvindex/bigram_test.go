package kvindex

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// sglangEaglePages is SGLang 0.5.23's RadixCache with is_eagle, reduced to one cached
// sequence: RadixKey's bigram view of n raw tokens has n-1 pairs (t_j, t_j+1), page_aligned
// keeps ⌊(n-1)/B⌋·B of them, and match_prefix counts the leading pages whose B pairs all equal
// the cached ones. It returns what match_prefix(probe) gives, in pages, after insert(cached).
func sglangEaglePages(cached, probe []uint32, b int) int {
	pairs := func(t []uint32) int { return max(len(t)-1, 0) / b * b }
	n := min(pairs(cached), pairs(probe))
	matched := 0
	for j := 0; j < n && cached[j] == probe[j] && cached[j+1] == probe[j+1]; j++ {
		matched++
	}
	return matched / b
}

// eagleStore is the BlockStored SGLang publishes for a sequence with bigram keys: one hash per
// page, token_ids the pages' pairs, decoded (kvevents) into the n+1 tokens they are made of.
func eagleStore(tokens []uint32, b int, hashBase uint64) *Store {
	pages := max(len(tokens)-1, 0) / b
	s := &Store{Medium: GPU, BlockSize: b, Bigram: true, PlainBlocks: pages}
	for i := range pages {
		s.Hashes = append(s.Hashes, hashBase+uint64(i))
	}
	if pages > 0 {
		s.Tokens = tokens[:pages*b+1]
	}
	return s
}

// TestBigramKeysMatchSGLang stores a random sequence as SGLang with EAGLE publishes it and checks
// the overlap of random probes (the sequence itself, prefixes ending on and around page
// boundaries, one token changed anywhere, one more token) against sglangEaglePages. Plain keys
// on the same events would over-credit a probe that has a page's tokens but not the token the
// page was cached with after them.
func TestBigramKeysMatchSGLang(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 25))
	for round := range 3000 {
		b := []int{1, 2, 4, 16}[rng.IntN(4)]
		seq := make([]uint32, rng.IntN(6*b+3))
		for i := range seq {
			seq[i] = uint32(rng.IntN(5)) // few distinct ids: pairs repeat, chains share blocks
		}
		ix, err := New(Config{BlockSize: b, Keys: KeysBigram})
		if err != nil {
			t.Fatal(err)
		}
		if s := eagleStore(seq, b, 1000); len(s.Hashes) > 0 {
			if res := ix.Store("w", s); res.Skip != SkipNone || res.ShortTokens || res.Stored != len(s.Hashes) {
				t.Fatalf("round %d: store %+v", round, res)
			}
		}
		probe := append([]uint32(nil), seq...)
		switch rng.IntN(4) {
		case 0:
			probe = probe[:rng.IntN(len(probe)+1)]
		case 1:
			if len(probe) > 0 {
				probe[rng.IntN(len(probe))] += 1 + uint32(rng.IntN(3))
			}
		case 2:
			probe = append(probe, uint32(rng.IntN(5)))
		}
		keys := KeysBigram.AppendRequestKeys(nil, probe, b, nil, nil)
		if want := max(len(probe)-1, 0) / b; len(keys) != want {
			t.Fatalf("round %d: %d tokens give %d keys at block size %d, want ⌊(n-1)/B⌋ = %d", round, len(probe), len(keys), b, want)
		}
		var out Overlaps
		ix.Overlap(keys, &out)
		got := 0
		if len(out.Workers) > 0 {
			got = out.Workers[0].GPU
		}
		if want := sglangEaglePages(seq, probe, b); got != want {
			t.Fatalf("round %d: block size %d, cached %v, probe %v: overlap %d, SGLang matches %d pages", round, b, seq, probe, got, want)
		}
	}
}

// TestBigramKeysSaltAndLoRA: under bigram keys, as under plain ones, a salt seeds block 0 and an
// adapter every block, on the store side and the request side alike.
func TestBigramKeysSaltAndLoRA(t *testing.T) {
	seq := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9}
	ix, _ := New(Config{BlockSize: 4, Keys: KeysBigram})
	s := eagleStore(seq, 4, 1)
	s.Salt, s.LoRA = []byte("tenant-a"), []byte("sql-lora")
	if res := ix.Store("w", s); res.Skip != SkipNone || res.Stored != 2 {
		t.Fatalf("store %+v", res)
	}
	for _, c := range []struct {
		lora, salt string
		want       int
	}{{"sql-lora", "tenant-a", 2}, {"sql-lora", "", 0}, {"", "tenant-a", 0}, {"sql-lora", "tenant-b", 0}} {
		var out Overlaps
		ix.Overlap(KeysBigram.AppendRequestKeys(nil, seq, 4, []byte(c.lora), []byte(c.salt)), &out)
		got := 0
		if len(out.Workers) > 0 {
			got = out.Workers[0].GPU
		}
		if got != c.want {
			t.Errorf("lora %q salt %q: overlap %d, want %d", c.lora, c.salt, got, c.want)
		}
	}
	// The plain scheme's request keys are unchanged by the scheme-aware function.
	tok := []uint32{1, 2, 3, 4, 5, 6, 7, 8}
	plain := KeysPlain.AppendRequestKeys(nil, tok, 4, nil, []byte("s"))
	if first := localHash(tok[:4], SaltedSeed(nil, []byte("s"))); len(plain) != 2 || plain[0] != first ||
		plain[1] != AppendKeys(nil, first, tok[4:], 4, nil)[0] {
		t.Errorf("plain request keys %x", plain)
	}
}

// TestKeySchemeMismatchRefused: EAGLE pairs against plain keys and plain ids against bigram
// keys are refused whole; a store without tokens (a placeholder) is not a mismatch.
func TestKeySchemeMismatchRefused(t *testing.T) {
	seq := []uint32{1, 2, 3, 4, 5}
	plain, _ := New(Config{BlockSize: 4})
	if res := plain.Store("w", eagleStore(seq, 4, 1)); res.Skip != SkipKeySchemeMismatch {
		t.Errorf("EAGLE store into plain keys: %+v, want key_scheme_mismatch", res)
	}
	bigram, _ := New(Config{BlockSize: 4, Keys: KeysBigram})
	if res := bigram.Store("w", &Store{Medium: GPU, Hashes: []uint64{1}, Tokens: seq[:4], BlockSize: 4, PlainBlocks: 1}); res.Skip != SkipKeySchemeMismatch {
		t.Errorf("plain store into bigram keys: %+v, want key_scheme_mismatch", res)
	}
	if plain.NumKeys()+bigram.NumKeys() != 0 {
		t.Error("a refused store added keys")
	}
	// Fewer pairs than pages: only the covered pages are indexed, as with plain tokens.
	s := eagleStore(append(seq, 6, 7, 8, 9), 4, 10) // 9 tokens: 2 pages
	s.Tokens = s.Tokens[:6]                         // 5 pairs: page 0 only
	if res := bigram.Store("w", s); res.Skip != SkipNone || !res.ShortTokens || res.Stored != 1 {
		t.Errorf("short bigram store: %+v, want 1 page stored with ShortTokens", res)
	}
}

// TestSnapshotKeySchemeRefused: a snapshot of bigram keys is not imported by a plain index, nor
// the other way round, and the error names the setting.
func TestSnapshotKeySchemeRefused(t *testing.T) {
	for _, c := range []struct{ from, to KeyScheme }{{KeysBigram, KeysPlain}, {KeysPlain, KeysBigram}} {
		src, _ := New(Config{BlockSize: 4, Keys: c.from})
		var st *Store
		if c.from == KeysBigram {
			st = eagleStore([]uint32{1, 2, 3, 4, 5}, 4, 1)
		} else {
			st = &Store{Medium: GPU, Hashes: []uint64{1}, Tokens: []uint32{1, 2, 3, 4}, BlockSize: 4, PlainBlocks: 1}
		}
		src.Store("w", st)
		snap, _, err := src.Export(0)
		if err != nil {
			t.Fatal(err)
		}
		dst, _ := New(Config{BlockSize: 4, Keys: c.to})
		if _, err := dst.Import(snap); err == nil || !strings.Contains(err.Error(), "model.speculative") {
			t.Errorf("%s snapshot into %s index: %v, want a key scheme error", c.from, c.to, err)
		}
		same, _ := New(Config{BlockSize: 4, Keys: c.from})
		if _, err := same.Import(snap); err != nil || same.NumKeys() != 1 {
			t.Errorf("%s snapshot into %s index: %v, %d keys", c.from, c.from, err, same.NumKeys())
		}
		other, _ := New(Config{BlockSize: 8, Keys: c.from})
		if _, err := other.Import(snap); err == nil || !strings.Contains(err.Error(), "block size 4") {
			t.Errorf("%s snapshot, block size 4 into 8: %v", c.from, err)
		}
	}
}
