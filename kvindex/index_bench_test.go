package kvindex

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// cpuTime returns the CPU time the process has used. On a shared machine CPU time per unit is
// steadier than wall time, which also counts the time other processes run.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

const benchB = 16 // tokens per block, vLLM's default

// benchEvents builds realistic BlockStored events for nWorkers streams: each request shares a
// 32-block system prompt, then adds unique blocks, announced in chained events of perEvent
// blocks (one prefill chunk per event). As in vLLM, cache hits are not announced: only a
// worker's first request stores the system prompt, later ones chain after it. Engine hashes
// are random, as vLLM's SHA-256 digests are.
func benchEvents(nWorkers, requests, blocksPerRequest, perEvent int) [][]*Store {
	r := rand.New(rand.NewPCG(7, 8))
	sys := make([]uint32, 32*benchB)
	for i := range sys {
		sys[i] = r.Uint32N(150000)
	}
	out := make([][]*Store, nWorkers)
	for w := range out {
		sysEH := make([]uint64, 32)
		for i := range sysEH {
			sysEH[i] = r.Uint64()
		}
		for req := range requests {
			tokens := append([]uint32(nil), sys...)
			for range (blocksPerRequest - 32) * benchB {
				tokens = append(tokens, r.Uint32N(150000))
			}
			hashes := append([]uint64(nil), sysEH...)
			for range blocksPerRequest - 32 {
				hashes = append(hashes, r.Uint64())
			}
			first := 0
			if req > 0 {
				first = 32
			}
			for from := first; from < blocksPerRequest; from += perEvent {
				to := min(from+perEvent, blocksPerRequest)
				s := &Store{Hashes: hashes[from:to], Tokens: tokens[from*benchB : to*benchB], BlockSize: benchB, PlainBlocks: to - from}
				if from > 0 {
					s.HasParent, s.Parent = true, hashes[from-1]
				}
				out[w] = append(out[w], s)
			}
		}
	}
	return out
}

// BenchmarkStore applies BlockStored events (16-token blocks) of 8 workers and, as the baseline,
// inserts the same router keys into a bare map[uint64]uint64 (key -> worker bits). Both drop a
// worker's state (outside the timed region) before re-applying its events, so both run in steady
// state without table growth; Store's token arrays are read once there too, as they would be
// fresh from the decoder. Store also computes the keys (see BenchmarkKeys); the map does not.
func BenchmarkStore(b *testing.B) {
	const nWorkers, requests, blocksPerRequest = 8, 64, 160
	for _, perEvent := range []int{16, 128} {
		events := benchEvents(nWorkers, requests, blocksPerRequest, perEvent)
		ids := make([]WorkerID, nWorkers)
		for w := range ids {
			ids[w] = WorkerID(fmt.Sprintf("worker-%d", w))
		}
		b.Run(fmt.Sprintf("blocks_per_event=%d", perEvent), func(b *testing.B) {
			b.ReportAllocs()
			ix, err := New(Config{BlockSize: benchB})
			if err != nil {
				b.Fatal(err)
			}
			blocks, i := 0, 0
			var sink uint32
			var cpu time.Duration
			cpu0 := cpuTime(b)
			for b.Loop() {
				// One pass stores every event of every worker once; a worker is cleared before
				// its events are re-applied (the duplicate-store path is not what we measure).
				w := i % nWorkers
				b.StopTimer()
				cpu += cpuTime(b) - cpu0
				ix.ClearWorker(ids[w])
				sink += warm(events[w]) // the decoder has just written them
				cpu0 = cpuTime(b)
				b.StartTimer()
				for _, s := range events[w] {
					blocks += ix.Store(ids[w], s).Stored
				}
				i++
			}
			b.ReportMetric(float64(blocks)/b.Elapsed().Seconds(), "blocks/s")
			b.ReportMetric(b.Elapsed().Seconds()*1e9/float64(blocks), "ns/block")
			b.ReportMetric(float64(cpu+cpuTime(b)-cpu0)/float64(blocks), "cpu-ns/block")
			runtime.KeepAlive(sink)
		})
		b.Run(fmt.Sprintf("bare_map/blocks_per_event=%d", perEvent), func(b *testing.B) {
			b.ReportAllocs()
			// The same router keys, computed outside the timed loop, into one map of key ->
			// worker bits shared by all workers, as the index's key table is.
			keys := make([][]uint64, nWorkers)
			for w := range keys {
				seq := map[uint64]uint64{}
				for _, s := range events[w] {
					parent := uint64(0)
					if s.HasParent {
						parent = seq[s.Parent]
					}
					for j, k := range AppendKeys(nil, parent, s.Tokens, benchB, nil) {
						seq[s.Hashes[j]] = k
						keys[w] = append(keys[w], k)
					}
				}
			}
			m := map[uint64]uint64{}
			blocks, i := 0, 0
			var cpu time.Duration
			cpu0 := cpuTime(b)
			for b.Loop() {
				w := i % nWorkers
				b.StopTimer()
				cpu += cpuTime(b) - cpu0
				for _, k := range keys[w] {
					if m[k] &^= 1 << w; m[k] == 0 {
						delete(m, k)
					}
				}
				cpu0 = cpuTime(b)
				b.StartTimer()
				for _, k := range keys[w] {
					m[k] |= 1 << w
				}
				blocks += len(keys[w])
				i++
			}
			b.ReportMetric(float64(blocks)/b.Elapsed().Seconds(), "blocks/s")
			b.ReportMetric(b.Elapsed().Seconds()*1e9/float64(blocks), "ns/block")
			b.ReportMetric(float64(cpu+cpuTime(b)-cpu0)/float64(blocks), "cpu-ns/block")
		})
	}
}

// warm reads the tokens of events, as a decoder that has just produced them leaves them in
// cache.
func warm(events []*Store) uint32 {
	var acc uint32
	for _, s := range events {
		for _, t := range s.Tokens {
			acc += t
		}
	}
	return acc
}

// overlapIndex holds a 2,048-key prompt on 64 workers, each with a different GPU prefix and CPU
// continuation, plus background blocks so that the tables are far larger than the prompt.
func overlapIndex(b *testing.B, nWorkers, nKeys, background int) (*Index, []uint64) {
	r := rand.New(rand.NewPCG(9, 10))
	ix, err := New(Config{BlockSize: benchB})
	if err != nil {
		b.Fatal(err)
	}
	tokens := make([]uint32, nKeys*benchB)
	for i := range tokens {
		tokens[i] = r.Uint32N(150000)
	}
	bg := make([]uint32, 64*benchB)
	for w := range nWorkers {
		id := WorkerID(fmt.Sprintf("worker-%02d", w))
		hashes := make([]uint64, nKeys)
		for i := range hashes {
			hashes[i] = r.Uint64()
		}
		n := nKeys - w*7 // worker w holds a GPU prefix of nKeys-7w blocks
		ix.Store(id, &Store{Hashes: hashes[:n], Tokens: tokens[:n*benchB], BlockSize: benchB, PlainBlocks: n})
		if w%4 == 0 && n > 64 { // and some move their tail to CPU
			ix.Remove(id, GPU, hashes[n-64:n])
			ix.Store(id, &Store{Medium: CPU, Hashes: hashes[n-64 : n], Tokens: tokens[(n-64)*benchB : n*benchB], BlockSize: benchB,
				PlainBlocks: 64, HasParent: true, Parent: hashes[n-65]})
		}
		for j := 0; j < background; j += 64 {
			for i := range bg {
				bg[i] = r.Uint32N(150000)
			}
			for i := range hashes[:64] {
				hashes[i] = r.Uint64()
			}
			ix.Store(id, &Store{Hashes: hashes[:64], Tokens: bg, BlockSize: benchB, PlainBlocks: 64})
		}
	}
	return ix, Keys(tokens, benchB, nil)
}

// BenchmarkOverlap looks up a 2,048-key (32k-token) prompt against 64 workers.
func BenchmarkOverlap(b *testing.B) {
	for _, bg := range []int{0, 16384} {
		b.Run(fmt.Sprintf("workers=64/keys=2048/background_blocks_per_worker=%d", bg), func(b *testing.B) {
			ix, keys := overlapIndex(b, 64, 2048, bg)
			var out Overlaps
			ix.Overlap(keys, &out)
			if len(out.Workers) != 64 || out.Workers[0].GPU+out.Workers[0].CPU != 2048 {
				b.Fatalf("unexpected overlap: %d workers, first %+v", len(out.Workers), out.Workers[0])
			}
			b.ReportAllocs()
			for b.Loop() {
				ix.Overlap(keys, &out)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(keys)), "ns/key")
		})
	}
}

// BenchmarkMemory reports the heap retained per (block, worker) entry: unique keys (every block
// held by one worker) and a shared prefix (each key held by 8 workers).
func BenchmarkMemory(b *testing.B) {
	// Tables double when 3/4 full, so bytes per entry swing with the count: 2^20 entries (16,384
	// per worker) is the emptiest point of the cycle, 1.5 * 2^20 the fullest.
	for _, c := range []struct{ entries, share int }{{1 << 20, 1}, {3 << 19, 1}, {1 << 20, 8}, {3 << 19, 8}} {
		entries, share := c.entries, c.share
		b.Run(fmt.Sprintf("workers=64/entries=%d/workers_per_key=%d", entries, share), func(b *testing.B) {
			r := rand.New(rand.NewPCG(11, 12))
			perWorker := entries / 64
			tokens := make([]uint32, 64/share*perWorker*benchB)
			for i := range tokens {
				tokens[i] = r.Uint32N(150000)
			}
			hashes := make([]uint64, 64)
			var bytesPerEntry float64
			for b.Loop() {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				ix, err := New(Config{BlockSize: benchB})
				if err != nil {
					b.Fatal(err)
				}
				n := 0
				for w := range 64 {
					id := WorkerID(fmt.Sprintf("worker-%02d", w))
					group := w / share // workers of one group store the same token chains
					for c := 0; c < perWorker; c += 64 {
						for i := range hashes {
							hashes[i] = r.Uint64()
						}
						off := (group*perWorker + c) * benchB
						res := ix.Store(id, &Store{Hashes: hashes, Tokens: tokens[off : off+64*benchB], BlockSize: benchB, PlainBlocks: 64})
						n += res.Stored
					}
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				bytesPerEntry = float64(after.HeapAlloc-before.HeapAlloc) / float64(n)
				runtime.KeepAlive(ix)
			}
			b.ReportMetric(bytesPerEntry, "B/entry")
		})
	}
}

// BenchmarkKeys computes router keys of a 2,048-block (32k-token) prompt, the per-request cost
// on the query side and the hashing share of Store.
func BenchmarkKeys(b *testing.B) {
	r := rand.New(rand.NewPCG(15, 16))
	tokens := make([]uint32, 2048*benchB)
	for i := range tokens {
		tokens[i] = r.Uint32N(150000)
	}
	dst := make([]uint64, 0, 2048)
	for _, lora := range []string{"", "sql-lora"} {
		b.Run(fmt.Sprintf("blocks=2048/lora=%q", lora), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(4 * len(tokens)))
			for b.Loop() {
				dst = AppendKeys(dst[:0], 0, tokens, benchB, []byte(lora))
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*2048), "ns/block")
		})
	}
}
