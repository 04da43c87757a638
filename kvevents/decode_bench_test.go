package kvevents

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"
)

// cpuMeter reports work per CPU second of the benchmark's thread (see threadCPU).
type cpuMeter struct {
	start time.Duration
	ok    bool
}

func startCPU() cpuMeter {
	runtime.LockOSThread()
	d, ok := threadCPU()
	return cpuMeter{start: d, ok: ok}
}

// report adds "<unit>/cpu-s" for total units of work, and unlocks the thread.
func (c cpuMeter) report(b *testing.B, total float64, unit string) {
	defer runtime.UnlockOSThread()
	end, ok := threadCPU()
	if c.ok && ok && end > c.start {
		b.ReportMetric(total/(end-c.start).Seconds(), unit+"/cpu-s")
	}
}

// realisticBatches returns n map-form batches (vLLM >= 0.24) of a steady stream: each holds
// stores BlockStored events of 4–32 blocks of blockSize random token ids (pairs of events chain
// parent -> child) and one single-hash BlockRemoved per block stored by the previous batch, so
// applying the batches in a cycle keeps the index at a constant size.
func realisticBatches(n, stores, blockSize int) [][]byte {
	rng := rand.New(rand.NewPCG(1, 2))
	stored := make([][]uint64, n)
	events := make([][]ev, n)
	for i := range n {
		for s := range stores {
			blocks := 4 + rng.IntN(29)
			e := ev{kind: "BlockStored", blockSize: int64(blockSize), medium: "GPU", group: ptr[int64](0), specKind: "full_attention"}
			for range blocks {
				e.hashes = append(e.hashes, rng.Uint64())
			}
			for range blocks * blockSize {
				e.tokens = append(e.tokens, uint32(rng.IntN(152000)))
			}
			if s%2 == 1 {
				prev := events[i][len(events[i])-1].hashes
				e.parent = ptr(prev[len(prev)-1])
			}
			events[i] = append(events[i], e)
			stored[i] = append(stored[i], e.hashes...)
		}
	}
	out := make([][]byte, n)
	for i := range n {
		evs := events[i]
		for _, h := range stored[(i+n-1)%n] {
			evs = append(evs, ev{kind: "BlockRemoved", hashes: []uint64{h}, medium: "GPU", group: ptr[int64](0)})
		}
		out[i] = payload(0, evs...)
	}
	return out
}

// blocksIn counts the stored blocks of decoded batches.
func blocksIn(tb testing.TB, batches [][]byte) (blocks, events int) {
	var b Batch
	for _, p := range batches {
		if err := DecodeBatch(p, &b); err != nil {
			tb.Fatal(err)
		}
		events += len(b.Events)
		for _, e := range b.Events {
			if e.Kind == KindBlockStored {
				blocks += len(e.Hashes)
			}
		}
	}
	return blocks, events
}

// BenchmarkDecodeBatch measures decoding alone, per batch shape.
func BenchmarkDecodeBatch(b *testing.B) {
	for _, stores := range []int{1, 8, 32} {
		batches := realisticBatches(16, stores, 16)
		blocks, events := blocksIn(b, batches)
		size := 0
		for _, p := range batches {
			size += len(p)
		}
		b.Run(fmt.Sprintf("stores=%d", stores), func(b *testing.B) {
			var batch Batch
			for _, p := range batches { // warm the arenas: the steady state reuses them
				_ = DecodeBatch(p, &batch)
			}
			b.SetBytes(int64(size))
			b.ReportAllocs()
			cpu := startCPU()
			for b.Loop() {
				for _, p := range batches {
					if err := DecodeBatch(p, &batch); err != nil {
						b.Fatal(err)
					}
				}
			}
			cpu.report(b, float64(blocks)*float64(b.N), "blocks")
			sec := b.Elapsed().Seconds()
			b.ReportMetric(float64(events)*float64(b.N)/sec, "events/s")
			b.ReportMetric(float64(blocks)*float64(b.N)/sec, "blocks/s")
		})
	}
	b.Run("fixtures", func(b *testing.B) {
		var payloads [][]byte
		size := 0
		for _, fx := range loadFixtures(b) {
			if fx.Error == "" {
				p := readFixture(b, fx.File)
				payloads = append(payloads, p)
				size += len(p)
			}
		}
		var batch Batch
		b.SetBytes(int64(size))
		b.ReportAllocs()
		for b.Loop() {
			for _, p := range payloads {
				_ = DecodeBatch(p, &batch)
			}
		}
	})
}

// BenchmarkApplyPayload measures decode + apply into a kvindex.Index (B=16), with the same keys
// inserted into a bare map[uint64]uint64 as the baseline for the ratio.
func BenchmarkApplyPayload(b *testing.B) {
	for _, stores := range []int{8} {
		batches := realisticBatches(16, stores, 16)
		blocks, events := blocksIn(b, batches)
		b.Run(fmt.Sprintf("stores=%d", stores), func(b *testing.B) {
			e := newApplyEnv(b, 16, 0)
			for _, p := range batches { // warm: the index reaches its steady size
				if err := e.app.ApplyPayload(p); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			cpu := startCPU()
			for b.Loop() {
				for _, p := range batches {
					if err := e.app.ApplyPayload(p); err != nil {
						b.Fatal(err)
					}
				}
			}
			cpu.report(b, float64(blocks)*float64(b.N), "blocks")
			sec := b.Elapsed().Seconds()
			b.ReportMetric(float64(blocks)*float64(b.N)/sec, "blocks/s")
			b.ReportMetric(float64(events)*float64(b.N)/sec, "events/s")
		})
		b.Run(fmt.Sprintf("stores=%d/baseline_map", stores), func(b *testing.B) {
			var dec Batch
			var hashes [][]uint64
			for _, p := range batches {
				if err := DecodeBatch(p, &dec); err != nil {
					b.Fatal(err)
				}
				for _, ev := range dec.Events {
					if ev.Kind == KindBlockStored {
						hashes = append(hashes, append([]uint64(nil), ev.Hashes...))
					}
				}
			}
			m := make(map[uint64]uint64)
			b.ReportAllocs()
			cpu := startCPU()
			for b.Loop() {
				for _, hs := range hashes {
					for _, h := range hs {
						m[h]++
					}
				}
				for _, hs := range hashes {
					for _, h := range hs {
						delete(m, h)
					}
				}
			}
			cpu.report(b, float64(blocks)*float64(b.N), "blocks")
			b.ReportMetric(float64(blocks)*float64(b.N)/b.Elapsed().Seconds(), "blocks/s")
		})
	}
}
