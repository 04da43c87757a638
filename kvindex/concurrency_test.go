package kvindex

import (
	"fmt"
	"sync"
	"testing"
)

// TestOverlapConcurrentWithEvents runs lookups while events are applied (run it under -race).
// Each writer stores and removes whole chains of its own documents; readers must only ever see
// a consistent prefix: GPU counts in [0, len(keys)] and no worker that never stored.
func TestOverlapConcurrentWithEvents(t *testing.T) {
	const B, blocks, writers, rounds = 4, 32, 4, 120
	ix, err := New(Config{BlockSize: B})
	if err != nil {
		t.Fatal(err)
	}
	tokens := make([]uint32, blocks*B)
	for i := range tokens {
		tokens[i] = uint32(i)
	}
	keys := Keys(tokens, B, nil)
	stop := make(chan struct{})
	var readers, ws sync.WaitGroup
	errs := make(chan error, 4)
	for range 2 {
		readers.Go(func() {
			var out Overlaps
			for {
				select {
				case <-stop:
					return
				default:
				}
				ix.Overlap(keys, &out)
				for _, o := range out.Workers {
					if o.GPU < 0 || o.GPU+o.CPU+o.Disk > len(keys) || len(o.Worker) != 2 {
						select {
						case errs <- fmt.Errorf("inconsistent overlap %+v", o):
						default:
						}
					}
				}
			}
		})
	}
	for w := range writers {
		ws.Go(func() {
			id := WorkerID(fmt.Sprintf("w%d", w))
			hashes := make([]uint64, blocks)
			for i := range hashes {
				hashes[i] = uint64(w)<<32 | uint64(i)
			}
			for r := range rounds {
				n := 1 + r%blocks
				s := &Store{Hashes: hashes[:n], Tokens: tokens[:n*B], BlockSize: B, PlainBlocks: n}
				if got := ix.Store(id, s); got.Skip != SkipNone || got.Stored != n {
					errs <- fmt.Errorf("Store(%s) = %+v", id, got)
					return
				}
				if r%3 == 0 {
					ix.Store(id, &Store{Medium: CPU, Hashes: hashes[:n]})
				}
				switch r % 7 {
				case 0:
					ix.ClearWorker(id)
				case 1:
					ix.RemoveWorker(id)
				default:
					ix.Update(func(tx Tx) { // one lock for both removes
						tx.Remove(id, GPU, hashes[:n])
						tx.Remove(id, CPU, hashes[:n])
					})
				}
			}
		})
	}
	ws.Wait()
	close(stop)
	readers.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// Every writer ended its last round (r = rounds-1, r%7 = 0) by clearing what it stored.
	if n := ix.NumKeys(); n != 0 {
		t.Errorf("NumKeys() after all removes = %d, want 0", n)
	}
}

func TestOverlapDoesNotAllocate(t *testing.T) {
	ix, err := New(Config{BlockSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	tokens := make([]uint32, 64*16)
	for i := range tokens {
		tokens[i] = uint32(i * 7)
	}
	keys := Keys(tokens, 16, nil)
	for w := range 80 {
		hashes := make([]uint64, 40+w%20)
		for i := range hashes {
			hashes[i] = uint64(i + 1)
		}
		ix.Store(WorkerID(fmt.Sprintf("w%02d", w)), &Store{Hashes: hashes, Tokens: tokens[:16*len(hashes)], BlockSize: 16, PlainBlocks: len(hashes)})
		ix.Store(WorkerID(fmt.Sprintf("w%02d", w)), &Store{Medium: Disk, Hashes: hashes[30:]})
	}
	var out Overlaps
	ix.Overlap(keys, &out)
	if len(out.Workers) != 80 {
		t.Fatalf("got %d workers, want 80", len(out.Workers))
	}
	if a := testing.AllocsPerRun(50, func() { ix.Overlap(keys, &out) }); a != 0 {
		t.Errorf("Overlap allocated %.1f times per call, want 0", a)
	}
}
