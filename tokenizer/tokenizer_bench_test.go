package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// BenchmarkEncodeCorpus encodes the conformance text corpus, single thread,
// without the segment cache: all texts, and only those under 1 KiB (without the
// very long words and whitespace runs). testdata/bench_hf.py times Hugging Face
// tokenizers on the same two sets.
func BenchmarkEncodeCorpus(b *testing.B) {
	all := readJSONL[string](b, "conformance_texts.jsonl.gz")
	var short []string
	for _, s := range all {
		if len(s) < 1024 {
			short = append(short, s)
		}
	}
	for _, set := range []struct {
		name  string
		texts []string
	}{{"all", all}, {"short", short}} {
		total := 0
		for _, s := range set.texts {
			total += len(s)
		}
		for _, m := range modelNames {
			b.Run("corpus="+set.name+"/model="+m, func(b *testing.B) {
				tk := loadModel(b, m, Options{})
				var ids []uint32
				tokens := 0
				b.SetBytes(int64(total))
				b.ReportAllocs()
				for b.Loop() {
					tokens = 0
					for _, s := range set.texts {
						ids = tk.Encode(ids[:0], s, WithSpecialTokens)
						tokens += len(ids)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(tokens), "ns/token")
			})
		}
	}
}

// chatBody builds a Qwen3 chat request of about targetTokens tokens from corpus
// texts, and returns the body with a %d placeholder in the final user message.
func chatBody(b *testing.B, tk *Tokenizer, targetTokens int) string {
	texts := readJSONL[string](b, "conformance_texts.jsonl.gz")
	msgs := []map[string]string{{"role": "system", "content": "You are a helpful assistant."}}
	n, turn := 0, 0
	for n < targetTokens {
		var user, asst strings.Builder
		for user.Len() < 1500 {
			user.WriteString(texts[(turn*7)%len(texts)])
			user.WriteString("\n")
			turn++
		}
		for asst.Len() < 1500 {
			asst.WriteString(texts[(turn*11)%len(texts)])
			asst.WriteString("\n")
			turn++
		}
		msgs = append(msgs, map[string]string{"role": "user", "content": user.String()},
			map[string]string{"role": "assistant", "content": asst.String()})
		body, _ := json.Marshal(map[string]any{"messages": msgs})
		ids, err := tk.EncodeChat(nil, body, ChatOptions{})
		if err != nil {
			b.Fatal(err)
		}
		n = len(ids)
	}
	msgs = append(msgs, map[string]string{"role": "user", "content": "NEWTURN"})
	body, _ := json.Marshal(map[string]any{"messages": msgs})
	return strings.Replace(strings.ReplaceAll(string(body), "%", "%%"), "NEWTURN", "new question number %d, please answer", 1)
}

// BenchmarkChat renders and encodes a Qwen3 chat request of 8k and 32k tokens:
// cold (nothing cached: fresh word cache, no segment cache), steady (no segment
// cache, word cache warm as in a running router) and warm (every earlier turn
// in the segment cache; only the new final user message, different each
// iteration, is encoded afresh).
func BenchmarkChat(b *testing.B) {
	now := time.Date(2026, 7, 2, 0, 0, 0, 0, time.UTC)
	for _, size := range []int{8192, 32768} {
		tk := loadModel(b, "qwen3", Options{})
		tmpl := chatBody(b, tk, size)
		body0 := fmt.Appendf(nil, tmpl, 0)
		ids, err := tk.EncodeChat(nil, body0, ChatOptions{Now: now})
		if err != nil {
			b.Fatal(err)
		}
		for _, mode := range []string{"cold", "steady", "warm"} {
			b.Run(fmt.Sprintf("tokens=%dk/%s", len(ids)/1000, mode), func(b *testing.B) {
				t := tk
				if mode == "warm" {
					t = loadModel(b, "qwen3", Options{CacheSegments: 1 << 16})
					if _, err := t.EncodeChat(nil, body0, ChatOptions{Now: now}); err != nil {
						b.Fatal(err)
					}
				}
				var out []uint32
				var body []byte
				i := 0
				b.ReportAllocs()
				for b.Loop() {
					i++
					body = fmt.Appendf(body[:0], tmpl, i)
					if mode == "cold" {
						t = freshWordCache(tk)
					}
					if out, err = t.EncodeChat(out[:0], body, ChatOptions{Now: now}); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(len(out)), "tokens/request")
			})
		}
	}
}

// freshWordCache returns a copy of tk whose BPE word cache is empty.
func freshWordCache(tk *Tokenizer) *Tokenizer {
	c := *tk
	m := *tk.model
	m.words = &wordCache{}
	c.model = &m
	return &c
}
