package workload

import (
	"bytes"
	"testing"
)

// BenchmarkReadMooncake: parsing the JSONL (200-line fixture, 47 KB).
func BenchmarkReadMooncake(b *testing.B) {
	data := readFixture(b, headFixture)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		reqs, err := ReadMooncake(bytes.NewReader(data), MooncakeOptions{}, Window{})
		if err != nil {
			b.Fatal(err)
		}
		n += len(reqs)
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "requests/s")
}

// BenchmarkExpandPrompts: generating every prompt token of the fixture into a reused buffer,
// as a simulator feeding the router would.
func BenchmarkExpandPrompts(b *testing.B) {
	reqs := readHead(b)
	v := DefaultVocab()
	var buf []uint32
	b.ReportAllocs()
	toks := 0
	for b.Loop() {
		for i := range reqs {
			buf = v.AppendPrompt(buf[:0], &reqs[i])
			toks += len(buf)
		}
	}
	b.ReportMetric(float64(toks)/b.Elapsed().Seconds(), "tokens/s")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(toks), "ns/token")
}

// BenchmarkCompletionBody: rendering the JSON body loadgen sends.
func BenchmarkCompletionBody(b *testing.B) {
	reqs := readHead(b)
	v := DefaultVocab()
	var buf []byte
	b.ReportAllocs()
	toks := 0
	for b.Loop() {
		for i := range reqs {
			buf = AppendCompletionBody(buf[:0], v, &reqs[i], BodyOptions{Model: "m", Stream: true})
			toks += reqs[i].InputTokens
		}
	}
	b.ReportMetric(float64(toks)/b.Elapsed().Seconds(), "tokens/s")
}
