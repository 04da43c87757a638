package route

import (
	"bytes"
	"fmt"
	"testing"
)

// benchBody is a chat body of about n bytes with a kv_transfer_params member near its end.
func benchBody(n int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"model":"qwen3","messages":[`)
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, `{"role":"user","content":"turn %d: the system routes every request to a worker \"quoted\" and more text"},`, i)
	}
	b.Truncate(b.Len() - 1)
	b.WriteString(`],"stream":true,"kv_transfer_params":{"remote_host":"10.9.9.9"}}`)
	return b.Bytes()
}

// BenchmarkClean: the whole-body cleaning every routed body goes through (issue 23 item 1):
// member=kv holds a kv_transfer_params to cut, member=none is a plain chat body (no name, no
// \u escape: passed after the memchr checks).
func BenchmarkClean(b *testing.B) {
	for _, n := range []int{1 << 10, 64 << 10, 1 << 20, 10 << 20} {
		withKV := benchBody(n)
		plain := append(bytes.Clone(bytes.TrimSuffix(withKV, []byte(`,"kv_transfer_params":{"remote_host":"10.9.9.9"}}`))), '}')
		for _, c := range []struct {
			name string
			body []byte
			cut  int
		}{{"kv", withKV, 1}, {"none", plain, 0}} {
			b.Run(fmt.Sprintf("bytes=%d/member=%s", n, c.name), func(b *testing.B) {
				b.SetBytes(int64(len(c.body)))
				b.ReportAllocs()
				for b.Loop() {
					if _, cut, err := Clean(c.body); err != nil || len(cut) != c.cut {
						b.Fatal(cut, err)
					}
				}
			})
		}
	}
}

// BenchmarkStreamCleaner: chunked cleaning (STREAMED, full-duplex passthrough) in 64 KiB chunks.
func BenchmarkStreamCleaner(b *testing.B) {
	for _, n := range []int{64 << 10, 1 << 20, 10 << 20} {
		body := benchBody(n)
		b.Run(fmt.Sprintf("bytes=%d", n), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			out := make([]byte, 0, 64<<10)
			for b.Loop() {
				var c StreamCleaner
				for i := 0; i < len(body); i += 64 << 10 {
					out, _ = c.Write(out[:0], body[i:min(i+64<<10, len(body))])
				}
				if err := c.Close(); err != nil || len(c.Cut()) != 1 {
					b.Fatal(err)
				}
			}
		})
	}
}
