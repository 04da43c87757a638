package tokenizer

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// BenchmarkEncodeWords: plain-text encoding of ~1k-token English prompts that no earlier
// iteration sent (no segment cache; the word cache warm, as in a running router), on
// GOMAXPROCS goroutines at once: the per-word cost of pre-tokenization and the word cache.
func BenchmarkEncodeWords(b *testing.B) {
	tk := loadModel(b, "qwen3", Options{})
	words := strings.Fields(`the a router decides whether prefill runs remotely or on the decode worker
that already holds most of the prompt in its cache conversation tokens block keys overlap policy
request latency budget model serving cluster engine batch queue scheduler memory transfer network`)
	rng := rand.New(rand.NewPCG(7, 7))
	texts := make([]string, 64)
	for i := range texts {
		var sb strings.Builder
		for range 960 {
			sb.WriteString(words[rng.IntN(len(words))])
			sb.WriteByte(' ')
		}
		texts[i] = sb.String()
	}
	b.SetBytes(int64(len(texts[0])))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var ids []uint32
		i := 0
		for pb.Next() {
			i++
			ids = tk.Encode(ids[:0], "request "+strconv.Itoa(i)+". "+texts[i%len(texts)], WithoutSpecialTokens)
		}
	})
}
