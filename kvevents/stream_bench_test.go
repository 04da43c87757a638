package kvevents

import (
	"fmt"
	"testing"
)

// BenchmarkStreamLive measures the machine's in-order path (rule 3) including the XXH3 digest
// of the payload, per batch size.
func BenchmarkStreamLive(b *testing.B) {
	for _, size := range []int{256, 4096} {
		b.Run(fmt.Sprintf("payload=%d", size), func(b *testing.B) {
			st := NewStream(StreamOptions{HasReplay: true})
			payload := make([]byte, size)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			var seq uint64
			for b.Loop() {
				st.Live(seq, payload)
				seq++
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "batches/s")
		})
	}
}

// BenchmarkStreamGapReplay measures one gap healed by a replay of gap batches (detect, buffer,
// replay, dedupe, re-feed).
func BenchmarkStreamGapReplay(b *testing.B) {
	for _, gap := range []int{1, 64} {
		b.Run(fmt.Sprintf("gap=%d", gap), func(b *testing.B) {
			st := NewStream(StreamOptions{HasReplay: true})
			payload := make([]byte, 256)
			b.ReportAllocs()
			var seq uint64
			st.Live(seq, payload)
			for b.Loop() {
				from := seq + 1
				seq += uint64(gap) + 1
				st.Live(seq, payload)
				for s := from; s <= seq; s++ {
					st.ReplayBatch(s, payload)
				}
				st.EndReplay(EndMarker)
			}
			b.ReportMetric(float64(b.N*gap)/b.Elapsed().Seconds(), "replayed_batches/s")
		})
	}
}

// BenchmarkParseLive measures live frame parsing.
func BenchmarkParseLive(b *testing.B) {
	frames := [][]byte{[]byte("kv"), be8(42), make([]byte, 1024)}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, r := ParseLive(frames, DefaultMaxPayloadBytes); r != "" {
			b.Fatal(r)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}
