package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"
)

// withoutSplice returns a copy of tk whose chat template renders through the engine's own
// output buffer only.
func withoutSplice(t *testing.T, tk *Tokenizer) *Tokenizer {
	t.Helper()
	ct, err := compileChatTemplate(tk.cfg.chatTemplate)
	if err != nil {
		t.Fatal(err)
	}
	ct.splice = false
	c := *tk
	c.chat = ct
	return &c
}

func TestSpliceable(t *testing.T) {
	cases := []struct {
		name, src string
		want      bool
	}{
		{"plain_output", `{% for m in messages %}{{ m.content }}{% endfor %}`, true},
		{"assignment_set", `{%- set c = messages[0].content | trim %}{{ c }}`, true},
		{"namespace_assignment", `{% set ns = namespace(x=1) %}{% set ns.x = 2 %}{{ ns.x }}`, true},
		{"block_set_captures", `{% set x %}{{ messages[0].content }}{% endset %}{{ x | upper }}`, false},
		{"block_set_trimmed_captures", `{%- set x -%}a{%- endset %}{{ x }}`, false},
		{"macro_captures", `{% macro m(c) %}{{ c }}{% endmacro %}{{ m(messages[0].content) | length }}`, false},
		{"call_block_captures", `{% call m() %}x{% endcall %}`, false},
		{"filter_block_captures", `{% filter upper %}{{ messages[0].content }}{% endfilter %}`, false},
		{"marker_byte_in_source", "{{ messages[0].content }}\xff", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := spliceable(c.src); got != c.want {
				t.Errorf("spliceable(%q) = %v, want %v (splice.go: captured output must never hold markers)", c.src, got, c.want)
			}
		})
	}
}

// TestSpliceMatchesEngineOutput renders the conformance chats with and without splicing: the
// prompts and ids must be identical, and the test models must splice at all.
func TestSpliceMatchesEngineOutput(t *testing.T) {
	reqs := readJSONL[json.RawMessage](t, "conformance_chats.jsonl.gz")
	now := time.Date(2026, 7, 2, 12, 0, 0, 0, time.UTC)
	for _, m := range modelNames {
		t.Run(m, func(t *testing.T) {
			tk := loadModel(t, m, Options{})
			if !tk.chat.splice {
				t.Fatalf("%s's template does not splice", m)
			}
			plain := withoutSplice(t, tk)
			for i, body := range reqs {
				want, werr := plain.RenderChat(body, ChatOptions{Now: now})
				got, gerr := tk.RenderChat(body, ChatOptions{Now: now})
				if got != want || (gerr == nil) != (werr == nil) {
					t.Fatalf("chat %d: spliced %q (%v), engine %q (%v)", i, clip(got, 80), gerr, clip(want, 80), werr)
				}
				wantIDs, _ := plain.EncodeChat(nil, body, ChatOptions{Now: now})
				gotIDs, _ := tk.EncodeChat(nil, body, ChatOptions{Now: now})
				if !equalIDs(gotIDs, wantIDs) {
					t.Fatalf("chat %d: ids differ at %d", i, firstDiff(gotIDs, wantIDs))
				}
			}
		})
	}
}

// TestSpliceBufferReuseKeepsCaches: the pooled prompt buffer is overwritten by the next render,
// so no cached word or segment may point into it (both caches copy their keys), and the same
// body encodes the same after other renders.
func TestSpliceBufferReuseKeepsCaches(t *testing.T) {
	tk := loadModel(t, "qwen3", Options{CacheSegments: 1 << 10})
	body := func(word string) []byte {
		var long strings.Builder
		for i := range 40 {
			fmt.Fprintf(&long, "%s%d zebra quokka ", word, i)
		}
		b, _ := json.Marshal(map[string]any{"messages": []map[string]string{{"role": "user", "content": long.String()}}})
		return b
	}
	a, b := body("alpha"), body("omega")
	first, err := tk.EncodeChat(nil, a, ChatOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The splicer this goroutine just released (sync.Pool's per-P slot; under the race detector
	// the pool may drop it, and the check passes trivially).
	sp := tk.chat.splicers.Get().(*splicer)
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(sp.buf[:cap(sp.buf)])))
	hi := lo + uintptr(cap(sp.buf))
	tk.chat.splicers.Put(sp)
	inBuf := func(s string) bool {
		p := uintptr(unsafe.Pointer(unsafe.StringData(s)))
		return len(s) > 0 && p >= lo && p < hi
	}
	for i := range tk.model.words.shards {
		sh := &tk.model.words.shards[i]
		sh.mu.RLock()
		for w := range sh.m {
			if inBuf(w) {
				t.Errorf("word cache key %q points into the pooled prompt buffer", w)
			}
		}
		sh.mu.RUnlock()
	}
	tk.cache.mu.Lock()
	for k := range tk.cache.items {
		if inBuf(k) {
			t.Errorf("segment cache key %q points into the pooled prompt buffer", clip(k, 40))
		}
	}
	tk.cache.mu.Unlock()
	if _, err := tk.EncodeChat(nil, b, ChatOptions{}); err != nil {
		t.Fatal(err)
	}
	again, _ := tk.EncodeChat(nil, a, ChatOptions{})
	want, _ := withoutSplice(t, loadModel(t, "qwen3", Options{})).EncodeChat(nil, a, ChatOptions{})
	if !equalIDs(first, want) || !equalIDs(again, want) {
		t.Fatalf("ids of the same body changed after another render: first at %d, again at %d", firstDiff(first, want), firstDiff(again, want))
	}
}

// TestSpliceMarkerByteInBody: a raw 0xFF in the body (invalid UTF-8, which the decoder borrows
// as is) turns splicing off for that render; the result equals the engine's.
func TestSpliceMarkerByteInBody(t *testing.T) {
	tk := loadModel(t, "qwen3", Options{})
	body := []byte("{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\x01\x00\x00\x00 then a long enough tail to be spliced if it were allowed\"}]}")
	if !mayHoldMarker(body) {
		t.Fatal("mayHoldMarker missed a raw 0xFF")
	}
	got, gerr := tk.RenderChat(body, ChatOptions{})
	want, werr := withoutSplice(t, tk).RenderChat(body, ChatOptions{})
	if got != want || (gerr == nil) != (werr == nil) {
		t.Fatalf("spliced %q (%v), engine %q (%v)", got, gerr, want, werr)
	}
}

// TestSpliceConcurrent renders different bodies from several goroutines with one Tokenizer:
// each render has its own pooled state (run with -race).
func TestSpliceConcurrent(t *testing.T) {
	reqs := readJSONL[json.RawMessage](t, "conformance_chats.jsonl.gz")[:40]
	tk := loadModel(t, "qwen3", Options{})
	now := time.Date(2026, 7, 2, 12, 0, 0, 0, time.UTC)
	want := make([][]uint32, len(reqs))
	for i, body := range reqs {
		want[i], _ = tk.EncodeChat(nil, body, ChatOptions{Now: now})
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := range 4 {
		wg.Go(func() {
			for k := range 3 * len(reqs) {
				i := (k*7 + g) % len(reqs)
				got, _ := tk.EncodeChat(nil, reqs[i], ChatOptions{Now: now})
				if !equalIDs(got, want[i]) {
					errs <- fmt.Errorf("goroutine %d chat %d: ids differ at %d", g, i, firstDiff(got, want[i]))
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
