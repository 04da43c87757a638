package kvindex

import (
	"fmt"
	"testing"
)

// BenchmarkSnapshot exports and imports an index of 8 workers whose requests share a 32-block
// system prompt (benchEvents), in blocks/s and bytes of snapshot per block.
func BenchmarkSnapshot(b *testing.B) {
	for _, requests := range []int{200, 2000} {
		events := benchEvents(8, requests, 64, 16)
		ix, _ := New(Config{BlockSize: benchB})
		for w, evs := range events {
			for _, s := range evs {
				ix.Store(WorkerID(fmt.Sprintf("w%d", w)), s)
			}
		}
		snap, st, err := ix.Export(0)
		if err != nil {
			b.Fatal(err)
		}
		blocks := fmt.Sprintf("blocks=%d", st.Entries)
		b.Run("export/"+blocks, func(b *testing.B) {
			b.SetBytes(int64(len(snap)))
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := ix.Export(0); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(st.Entries)*float64(b.N)/b.Elapsed().Seconds(), "blocks/s")
			b.ReportMetric(float64(len(snap))/float64(st.Entries), "B/block")
		})
		b.Run("import/"+blocks, func(b *testing.B) {
			b.SetBytes(int64(len(snap)))
			b.ReportAllocs()
			for b.Loop() {
				ix2, _ := New(Config{BlockSize: benchB})
				if _, err := ix2.Import(snap); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(st.Entries)*float64(b.N)/b.Elapsed().Seconds(), "blocks/s")
		})
	}
}
