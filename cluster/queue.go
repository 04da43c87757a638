package cluster

import (
	"container/heap"
	"time"

	"github.com/condisagg/condisagg/sim"
)

// wakeKind says what an engine event does when it fires.
type wakeKind uint8

const (
	kindStepEnd wakeKind = iota + 1 // the step in flight ends: deliver its outcome, step again
	kindWake                        // an idle engine's KV transfer is due: step again
)

// engineEvent is one entry of the engine queue. gen invalidates a wake-up that a newly added
// request pre-empted.
type engineEvent struct {
	at   time.Duration
	seq  uint64
	eng  int32
	kind wakeKind
	gen  uint32
}

// engineQueue is a min-heap of engine events ordered by time, then insertion order.
type engineQueue []engineEvent

func (q engineQueue) Len() int { return len(q) }
func (q engineQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q engineQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *engineQueue) Push(x any)   { *q = append(*q, x.(engineEvent)) }
func (q *engineQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

func (q *engineQueue) push(ev engineEvent) { heap.Push(q, ev) }
func (q *engineQueue) pop() engineEvent    { return heap.Pop(q).(engineEvent) }

// delivery is one KV event waiting for its delay to pass before the index sees it. Its slices
// are copies: the engine reuses its own at the next step.
type delivery struct {
	at  time.Duration
	eng int32
	ev  sim.Event // its slices copied from the step's
}

// deliveryQueue is a FIFO of deliveries; with one fixed delay their times never decrease.
type deliveryQueue struct {
	items []delivery
	head  int
}

func (q *deliveryQueue) empty() bool     { return q.head == len(q.items) }
func (q *deliveryQueue) peek() *delivery { return &q.items[q.head] }
func (q *deliveryQueue) push(d delivery) { q.items = append(q.items, d) }
func (q *deliveryQueue) pop() (d delivery) {
	d = q.items[q.head]
	q.items[q.head] = delivery{}
	q.head++
	if q.head > 1024 && q.head*2 > len(q.items) {
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items, q.head = q.items[:n], 0
	}
	return d
}

// pendingLeg is a request leg on its way to an engine's scheduler: it reaches it after the
// engine's own request handling (Config.RequestOverhead).
type pendingLeg struct {
	at     time.Duration
	i      int32 // request index
	eng    int32
	remote bool // the decode leg of a remote prefill
	// prefill: the prefill leg of a remote prefill (neither: a whole request)
	prefill bool
}

// legQueue is a FIFO of pending legs; with one fixed overhead their times never decrease.
type legQueue struct {
	items []pendingLeg
	head  int
}

func (q *legQueue) empty() bool       { return q.head == len(q.items) }
func (q *legQueue) peek() *pendingLeg { return &q.items[q.head] }
func (q *legQueue) push(h pendingLeg) { q.items = append(q.items, h) }
func (q *legQueue) pop() (h pendingLeg) {
	h = q.items[q.head]
	q.head++
	if q.head > 1024 && q.head*2 > len(q.items) {
		n := copy(q.items, q.items[q.head:])
		q.items, q.head = q.items[:n], 0
	}
	return h
}
