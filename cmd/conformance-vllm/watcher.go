package main

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-zeromq/goczmq/v4"

	"github.com/condisagg/condisagg/kvevents"
)

// ---- the driver's own view of the engine's events ----

// watcher subscribes to the engine's PUB socket: the last sequence number published tells when
// condisagg has caught up, and the decoded events explain a mismatch.
type watcher struct {
	sock *goczmq.Sock
	mu   sync.Mutex
	last int64 // -1: nothing yet
	at   time.Time
	log  []string // batches since the last take
	// blocks holds the token ids of every stored block in arrival order (blockKey), so that the
	// driver can wait for the store a request must have produced.
	blocks []string
	st     eventStats
	quit   chan struct{}
	done   chan struct{}
}

func newWatcher(endpoint string) (*watcher, error) {
	// A receive timeout lets the loop notice close.
	s := goczmq.NewSock(goczmq.Sub, goczmq.SockSetRcvtimeo(200), goczmq.SockSetSubscribe(""), goczmq.SockSetLinger(0))
	if err := s.Connect(endpoint); err != nil {
		s.Destroy()
		return nil, fmt.Errorf("subscribe %s: %w", endpoint, err)
	}
	w := &watcher{sock: s, last: -1, quit: make(chan struct{}), done: make(chan struct{})}
	go w.loop()
	return w, nil
}

func (w *watcher) loop() {
	defer close(w.done)
	var b kvevents.Batch
	for {
		select {
		case <-w.quit:
			return
		default:
		}
		frames, err := w.sock.RecvMessage()
		if err != nil || len(frames) != 3 || len(frames[1]) != 8 {
			continue
		}
		var seq int64
		for _, x := range frames[1] {
			seq = seq<<8 | int64(x)
		}
		b.Reset()
		desc := fmt.Sprintf("seq %d: ", seq)
		if err := kvevents.DecodeBatch(frames[2], &b); err != nil {
			desc += "undecodable: " + err.Error()
		} else {
			desc += describe(&b)
		}
		w.mu.Lock()
		w.last, w.at = seq, time.Now()
		w.log = append(w.log, desc)
		w.count(&b)
		w.keep(&b)
		w.mu.Unlock()
	}
}

type eventStats struct{ batches, stored, storedBlocks, loraStored, removed, cleared int }

func (w *watcher) stats() eventStats { w.mu.Lock(); defer w.mu.Unlock(); return w.st }

func (w *watcher) count(b *kvevents.Batch) {
	w.st.batches++
	for i := range b.Events {
		switch e := &b.Events[i]; e.Kind {
		case kvevents.KindBlockStored:
			w.st.stored++
			w.st.storedBlocks += len(e.Hashes)
			if e.HasLoRAName {
				w.st.loraStored++
			}
		case kvevents.KindBlockRemoved:
			w.st.removed++
		case kvevents.KindAllBlocksCleared:
			w.st.cleared++
		}
	}
}

// keep records the tokens of every block the batch stored (copied: b is reused).
func (w *watcher) keep(b *kvevents.Batch) {
	for i := range b.Events {
		e := &b.Events[i]
		if e.Kind != kvevents.KindBlockStored || e.BlockSize <= 0 {
			continue
		}
		for j := 0; j+int(e.BlockSize) <= len(e.Tokens); j += int(e.BlockSize) {
			w.blocks = append(w.blocks, blockKey(e.Tokens[j:j+int(e.BlockSize)]))
		}
	}
}

func blockKey(tokens []uint32) string {
	var sb strings.Builder
	for _, t := range tokens {
		fmt.Fprintf(&sb, "%d,", t)
	}
	return sb.String()
}

// mark is the position from which waitStored looks.
func (w *watcher) mark() int { w.mu.Lock(); defer w.mu.Unlock(); return len(w.blocks) }

// storedSince reports whether a block with these tokens has been stored since mark.
func (w *watcher) storedSince(tokens []uint32, mark int) bool {
	key := blockKey(tokens)
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Contains(w.blocks[mark:], key)
}

func describe(b *kvevents.Batch) string {
	var parts []string
	for i := range b.Events {
		e := &b.Events[i]
		switch e.Kind {
		case kvevents.KindBlockStored:
			s := fmt.Sprintf("Stored(%d blocks", len(e.Hashes))
			if e.HasParent {
				s += fmt.Sprintf(", parent %x", e.Parent)
			} else {
				s += ", no parent"
			}
			if e.HasLoRAName {
				s += ", lora " + string(e.LoRAName)
			}
			if e.Salt != nil {
				s += ", salt " + string(e.Salt)
			}
			parts = append(parts, s+fmt.Sprintf(", %d tokens, first hash %x)", len(e.Tokens), e.Hashes[0]))
		case kvevents.KindBlockRemoved:
			parts = append(parts, fmt.Sprintf("Removed(%x)", e.Hashes))
		case kvevents.KindAllBlocksCleared:
			parts = append(parts, "AllBlocksCleared")
		default:
			parts = append(parts, fmt.Sprintf("kind %d", e.Kind))
		}
	}
	return strings.Join(parts, " ")
}

// quiet waits until no batch arrived for settleQuiet and returns the last seq (-1: none yet).
func (w *watcher) quiet() int64 {
	for {
		w.mu.Lock()
		last, at := w.last, w.at
		w.mu.Unlock()
		if since := time.Since(at); at.IsZero() || since >= settleQuiet {
			if at.IsZero() {
				time.Sleep(settleQuiet)
				w.mu.Lock()
				changed := !w.at.IsZero()
				w.mu.Unlock()
				if changed {
					continue
				}
			}
			return last
		} else {
			time.Sleep(settleQuiet - since)
		}
	}
}

// forgetSeq makes the watcher wait for a new publisher: the engine restarted, and its first
// batch will have seq 0.
func (w *watcher) forgetSeq() {
	w.mu.Lock()
	w.last, w.at = -1, time.Time{}
	w.mu.Unlock()
}

func (w *watcher) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	l := w.log
	w.log = nil
	return l
}

func (w *watcher) peek() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.log)
}

func (w *watcher) close() {
	close(w.quit)
	<-w.done
	w.sock.Destroy()
}
