package main

import (
	"fmt"
	"strconv"
	"time"
)

// The driver's watchers, one per data-parallel rank of the engine (vLLM publishes rank r on the
// PUB port + r, vllm-kv-events.md §1.3; one rank without data parallelism).

// watch subscribes to every rank's PUB socket.
func (d *driver) watch() error {
	for r := range max(d.c.dp, 1) {
		w, err := newWatcher("tcp://127.0.0.1:" + strconv.Itoa(d.c.kvPort+r))
		if err != nil {
			return fmt.Errorf("rank %d: %w", r, err)
		}
		d.subs = append(d.subs, w)
	}
	return nil
}

func (d *driver) closeWatchers() {
	for _, w := range d.subs {
		w.close()
	}
}

// quiet waits until every rank has been quiet for settleQuiet.
func (d *driver) quiet() {
	for _, w := range d.subs {
		w.quiet()
	}
}

// take returns and forgets every rank's batches since the last take, each marked with its rank
// when there is more than one.
func (d *driver) take() []string { return d.collect((*watcher).take) }

// peek returns every rank's batches since the last take.
func (d *driver) peek() []string { return d.collect((*watcher).peek) }

func (d *driver) collect(f func(*watcher) []string) []string {
	var out []string
	for r, w := range d.subs {
		for _, s := range f(w) {
			if len(d.subs) > 1 {
				s = "rank " + strconv.Itoa(r) + " " + s
			}
			out = append(out, s)
		}
	}
	return out
}

// marks returns every rank's position for waitStored.
func (d *driver) marks() []int {
	m := make([]int, len(d.subs))
	for r, w := range d.subs {
		m[r] = w.mark()
	}
	return m
}

// waitStored waits until a block with these tokens has been stored on any rank since marks,
// and returns that rank; false after timeout.
func (d *driver) waitStored(tokens []uint32, marks []int, timeout time.Duration) (int, bool) {
	deadline := time.Now().Add(timeout)
	for {
		for r, w := range d.subs {
			if w.storedSince(tokens, marks[r]) {
				return r, true
			}
		}
		if time.Now().After(deadline) {
			return -1, false
		}
		time.Sleep(10 * time.Millisecond)
	}
}
