package pool

import "github.com/condisagg/condisagg/internal/openaddr"

// keyCounts counts references per chained block key: a decode worker's active set (the keys of
// its in-flight bypass bookings). Every booking adds one reference per prompt block key and its
// release drops them, about 500 of each for an 8k-token prompt, so this sits on the decision
// path; an open-addressing table (internal/openaddr: linear probing, backward-shift deletion)
// does it in about a quarter of the time of a Go map (BenchmarkKeyCounts: 7.0 µs against
// 29.8 µs to book and release 512 keys). The table grows when 3/4 full and shrinks only on
// reset.
type keyCounts struct {
	t openaddr.Table[int32] // key -> count, >= 1
}

// len returns the number of distinct keys held.
func (c *keyCounts) len() int { return c.t.Len() }

// get returns k's count (0 when absent).
func (c *keyCounts) get(k uint64) int32 { return c.t.Get(k) }

// add adds one reference to k.
func (c *keyCounts) add(k uint64) { c.t.Incr(k) }

// drop removes one reference from k, and k with its last one; an absent k is ignored.
func (c *keyCounts) drop(k uint64) { c.t.Decr(k) }

// reset empties c and gives its memory back.
func (c *keyCounts) reset() { *c = keyCounts{} }
