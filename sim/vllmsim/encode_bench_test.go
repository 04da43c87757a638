package vllmsim

import (
	"fmt"
	"testing"

	"github.com/condisagg/condisagg/sim"
)

// BenchmarkEncodeBatch: msgpack encoding of a step's events (one 64-block store and 64 removes).
func BenchmarkEncodeBatch(b *testing.B) {
	hashes := make([]uint64, 64)
	for i := range hashes {
		hashes[i] = uint64(i) * 0x9E3779B97F4A7C15
	}
	events := []sim.Event{{Kind: sim.EventBlockStored, Hashes: hashes, Tokens: seqTokens(64*16, 1000)}}
	for i := range hashes {
		events = append(events, sim.Event{Kind: sim.EventBlockRemoved, Hashes: hashes[i : i+1]})
	}
	for _, f := range []EventFormat{FormatArray, FormatMap} {
		b.Run(fmt.Sprintf("format=%d", f), func(b *testing.B) {
			enc := Encoder{Format: f, BlockSize: 16}
			buf := enc.AppendBatch(nil, 1, events)
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			for b.Loop() {
				buf = enc.AppendBatch(buf[:0], 1, events)
			}
			b.ReportMetric(float64(b.N*len(events))/b.Elapsed().Seconds(), "events/s")
		})
	}
}
