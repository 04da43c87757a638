package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestCacheMatchesUncached: the segment cache never changes ids, on the text
// corpus encoded twice (cold and warm) and on multi-turn chats grown turn by turn.
func TestCacheMatchesUncached(t *testing.T) {
	texts := readJSONL[string](t, "conformance_texts.jsonl.gz")
	reqs := readJSONL[json.RawMessage](t, "conformance_chats.jsonl.gz")
	now := time.Date(2026, 7, 2, 12, 0, 0, 0, time.UTC)
	for _, m := range modelNames {
		t.Run(m, func(t *testing.T) {
			plain := loadModel(t, m, Options{})
			cached := loadModel(t, m, Options{CacheSegments: 4096, CacheBytes: 8 << 20})
			for pass := range 2 {
				for i, text := range texts[:800] {
					want := plain.Encode(nil, text, WithSpecialTokens)
					if got := cached.Encode(nil, text, WithSpecialTokens); !equalIDs(got, want) {
						t.Fatalf("pass %d text %d: cached %v != uncached %v", pass, i, clip32(got, 8), clip32(want, 8))
					}
				}
			}
			for i, body := range reqs[:25] {
				for _, prefix := range growingPrefixes(t, body) {
					want, err1 := plain.EncodeChat(nil, prefix, ChatOptions{Now: now})
					got, err2 := cached.EncodeChat(nil, prefix, ChatOptions{Now: now})
					if (err1 == nil) != (err2 == nil) || !equalIDs(got, want) {
						t.Fatalf("chat %d: cached and uncached differ (%v, %v)", i, err1, err2)
					}
				}
			}
			if st := cached.CacheStats(); st.Hits == 0 || st.Entries == 0 {
				t.Errorf("cache never hit: %+v", st)
			}
		})
	}
}

// growingPrefixes returns the request with its first 1..n messages.
func growingPrefixes(t *testing.T, body json.RawMessage) [][]byte {
	t.Helper()
	var req map[string]json.RawMessage
	if err := json.Unmarshal(body, &req); err != nil {
		t.Fatal(err)
	}
	var msgs []json.RawMessage
	if err := json.Unmarshal(req["messages"], &msgs); err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for n := 1; n <= len(msgs); n++ {
		req["messages"], _ = json.Marshal(msgs[:n])
		b, _ := json.Marshal(req)
		out = append(out, b)
	}
	return out
}

// TestCacheBounded: entries and bytes never exceed their limits; the least
// recently used segment is evicted first.
func TestCacheBounded(t *testing.T) {
	tk := loadSynthetic(t, "bytelevel")
	tk.cache = newSegmentCache(8, 4096)
	seg := func(i int) string { return fmt.Sprintf("segment number %04d<eos>", i) }
	for i := range 100 {
		tk.Encode(nil, seg(i), WithoutSpecialTokens)
		st := tk.CacheStats()
		if st.Entries > 8 || st.Bytes > 4096 {
			t.Fatalf("after %d inserts: %+v exceeds 8 entries / 4096 bytes", i+1, st)
		}
	}
	before := tk.CacheStats()
	tk.Encode(nil, seg(99), WithoutSpecialTokens) // most recent: still cached
	tk.Encode(nil, seg(0), WithoutSpecialTokens)  // evicted long ago
	after := tk.CacheStats()
	if after.Hits != before.Hits+1 || after.Misses != before.Misses+1 {
		t.Errorf("want one hit and one miss, stats went %+v -> %+v", before, after)
	}
	huge := strings.Repeat("x", 8192)
	tk.Encode(nil, huge, WithoutSpecialTokens)
	if st := tk.CacheStats(); st.Bytes > 4096 {
		t.Errorf("an entry larger than the byte bound was kept: %+v", st)
	}
}

// TestCacheConcurrent runs encodes from several goroutines (meaningful under -race).
func TestCacheConcurrent(t *testing.T) {
	tk := loadSynthetic(t, "bytelevel")
	tk.cache = newSegmentCache(16, 1<<20)
	want := make([][]uint32, 32)
	for i := range want {
		want[i] = loadSynthetic(t, "bytelevel").Encode(nil, fmt.Sprintf("hello world %d<eos>again %d", i%20, i), WithSpecialTokens)
	}
	var wg sync.WaitGroup
	errs := make(chan string, 4*len(want))
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range want {
				j := (i + g*7) % len(want)
				got := tk.Encode(nil, fmt.Sprintf("hello world %d<eos>again %d", j%20, j), WithSpecialTokens)
				if !equalIDs(got, want[j]) {
					errs <- fmt.Sprintf("goroutine %d text %d: %v != %v", g, j, got, want[j])
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// TestCachePositionalSegments: with Metaspace prepend_scheme "first" a segment
// encodes differently at the start of the input, and the cache must not mix
// the two.
func TestCachePositionalSegments(t *testing.T) {
	plain := loadSynthetic(t, "metaspace_first")
	cached := loadSynthetic(t, "metaspace_first")
	cached.cache = newSegmentCache(64, 1<<20)
	inputs := []string{"hello world again and again", "</s>hello world again and again", "hello world again and again</s>hello world again and again"}
	for pass := range 2 {
		for _, s := range inputs {
			want := plain.Encode(nil, s, WithSpecialTokens)
			if got := cached.Encode(nil, s, WithSpecialTokens); !equalIDs(got, want) {
				t.Errorf("pass %d %q: cached %v, uncached %v", pass, s, got, want)
			}
		}
	}
	if st := cached.CacheStats(); st.Hits == 0 {
		t.Errorf("later segments never hit the cache: %+v", st)
	}
}

// TestEncodeChatConcurrent renders and encodes chats from several goroutines on
// one cached Tokenizer (meaningful under -race) and checks every result.
func TestEncodeChatConcurrent(t *testing.T) {
	reqs := readJSONL[json.RawMessage](t, "conformance_chats.jsonl.gz")[:24]
	want := readJSONL[chatExpect](t, "conformance_qwen3_chats_hf.jsonl.gz")
	tk := loadModel(t, "qwen3", Options{CacheSegments: 256})
	now := time.Date(2026, 7, 2, 12, 0, 0, 0, time.UTC)
	var wg sync.WaitGroup
	errs := make(chan string, 3*len(reqs))
	for g := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range reqs {
				j := (i + 5*g) % len(reqs)
				ids, err := tk.EncodeChat(nil, reqs[j], ChatOptions{Now: now})
				if err != nil || !equalIDs(ids, want[j].IDs) {
					errs <- fmt.Sprintf("goroutine %d chat %d: ids differ (err %v)", g, j, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
