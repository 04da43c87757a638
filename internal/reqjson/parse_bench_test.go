package reqjson

import (
	"bytes"
	"fmt"
	"testing"
)

// BenchmarkParse: the exact reading of a completion body with a long prompt (validates the
// whole document, indexes the top level).
func BenchmarkParse(b *testing.B) {
	for _, n := range []int{1 << 10, 64 << 10, 1 << 20} {
		prompt := bytes.Repeat([]byte(`the system routes every request \"quoted\" `), n/42+1)[:n]
		body := append(append([]byte(`{"model":"qwen3","prompt":"`), prompt...), `","stream":"true","max_tokens":8}`...)
		b.Run(fmt.Sprintf("bytes=%d", n), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Parse(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
