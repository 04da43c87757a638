// Package fleet estimates the steady state of one model's fleet for the slo policy: per pool,
// the placements, uncached prompt tokens (and their attention pairs) and output tokens per
// second, and how fast the pool's booked prefill queue grows, over a sliding window. The router
// feeds it from its decisions and answers and hands its View to the policy (policy.FleetView),
// in the server and in the simulator alike, on the router's clock.
//
// Memory is a fixed ring of Buckets buckets; an observation costs O(1) (a bucket advance clears
// at most Buckets buckets, whatever the gap since the last one).
package fleet

import (
	"sync"
	"time"

	"github.com/condisagg/condisagg/policy"
)

// Buckets is the number of slices of the window: the rates forget in steps of window/Buckets.
const Buckets = 16

// DefaultWindow is the span the rates cover: long enough that a 60 req/s fleet sees hundreds of
// requests, short enough to follow a load step within seconds.
const DefaultWindow = 10 * time.Second

// minSpan is the least history a view needs before the policy may use it: below it the rates
// would come from a handful of requests (half the window for windows under two seconds).
const minSpan = time.Second

// Pool names a pool of the view: where a placement's prefill runs.
type Pool int

const (
	// Decode is the decode pool (a local prefill on a decode worker).
	Decode Pool = iota
	// Prefill is the prefill pool (a remote prefill, or the whole request on a prefill worker).
	Prefill
)

type counts struct {
	requests, tokens, pairs, output [2]float64
}

func (c *counts) add(o *counts, sign float64) {
	for p := range 2 {
		c.requests[p] += sign * o.requests[p]
		c.tokens[p] += sign * o.tokens[p]
		c.pairs[p] += sign * o.pairs[p]
		c.output[p] += sign * o.output[p]
	}
}

// queueSample is the first booked prefill queue seen in a bucket, per pool.
type queueSample struct {
	ok    bool
	at    time.Time
	queue [2]int64
}

// Estimator is the sliding-window estimate. Safe for concurrent use.
type Estimator struct {
	mu      sync.Mutex
	window  time.Duration
	width   time.Duration // window / Buckets
	least   time.Duration // the least span of a view: min(minSpan, window/2)
	started bool
	epoch   time.Time // the first observation; bucket n covers [epoch+n·width, epoch+(n+1)·width)
	cur     int64     // the bucket number of the newest bucket
	ring    [Buckets]counts
	queue   [Buckets]queueSample
	sum     counts // the ring's total
}

// New is an estimator over window (DefaultWindow when <= 0).
func New(window time.Duration) *Estimator {
	if window <= 0 {
		window = DefaultWindow
	}
	width := window / Buckets
	if width <= 0 {
		width = 1
	}
	return &Estimator{window: width * Buckets, width: width, least: min(minSpan, width*Buckets/2)}
}

// Window is the span the rates cover once the estimator has seen that much history.
func (e *Estimator) Window() time.Duration { return e.window }

// advance moves the ring to now's bucket (callers hold mu). A clock that steps back keeps
// counting into the newest bucket.
func (e *Estimator) advance(now time.Time) {
	if !e.started {
		e.started, e.epoch = true, now
		return
	}
	n := int64(now.Sub(e.epoch) / e.width)
	if n <= e.cur {
		return
	}
	for k := e.cur + 1; k <= n && k <= e.cur+Buckets; k++ {
		i := k % Buckets
		e.sum.add(&e.ring[i], -1)
		e.ring[i] = counts{}
		e.queue[i] = queueSample{}
	}
	e.cur = n
}

// Booked counts one placement whose prefill of tokens uncached prompt tokens (after cached
// ones) runs on pool p.
func (e *Estimator) Booked(now time.Time, p Pool, tokens, cached int64) {
	if tokens < 0 {
		tokens = 0
	}
	pairs := float64(tokens) * (float64(cached) + float64(tokens)/2)
	e.mu.Lock()
	e.advance(now)
	b := &e.ring[e.cur%Buckets]
	b.requests[p]++
	b.tokens[p] += float64(tokens)
	b.pairs[p] += pairs
	e.sum.requests[p]++
	e.sum.tokens[p] += float64(tokens)
	e.sum.pairs[p] += pairs
	e.mu.Unlock()
}

// Output counts tokens output tokens decoded on pool p (an answer's end).
func (e *Estimator) Output(now time.Time, p Pool, tokens int) {
	if tokens <= 0 {
		return
	}
	e.mu.Lock()
	e.advance(now)
	e.ring[e.cur%Buckets].output[p] += float64(tokens)
	e.sum.output[p] += float64(tokens)
	e.mu.Unlock()
}

// View returns the rates over the window ending at now (the ring's buckets, the newest only
// partly elapsed), given each pool's booked prefill queue at now (prompt tokens not yet
// prefilled), which it also records for the queue growth. A view with less than a second of
// history has Window 0: the policy does not use it.
func (e *Estimator) View(now time.Time, decodeQueue, prefillQueue int64) policy.FleetView {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.advance(now)
	q := queueSample{ok: true, at: now, queue: [2]int64{decodeQueue, prefillQueue}}
	if s := &e.queue[e.cur%Buckets]; !s.ok {
		*s = q
	}
	// The oldest bucket still in the ring starts Buckets-1 buckets before the newest; the
	// newest is only partly elapsed.
	start := e.epoch.Add(time.Duration(e.cur-Buckets+1) * e.width)
	if start.Before(e.epoch) {
		start = e.epoch
	}
	span := now.Sub(start)
	if span < e.least {
		return policy.FleetView{}
	}
	sec := span.Seconds()
	v := policy.FleetView{Window: span}
	for p, r := range [...]*policy.PoolRates{&v.Decode, &v.Prefill} {
		r.Requests = e.sum.requests[p] / sec
		r.PrefillTokens = e.sum.tokens[p] / sec
		r.PrefillPairs = e.sum.pairs[p] / sec
		r.OutputTokens = e.sum.output[p] / sec
	}
	// Queue growth: from the oldest sample in the ring to now.
	for k := e.cur - Buckets + 1; k < e.cur; k++ {
		if k < 0 {
			continue
		}
		s := &e.queue[k%Buckets]
		if !s.ok {
			continue
		}
		if d := now.Sub(s.at); d >= e.least {
			v.Decode.QueueGrowth = float64(decodeQueue-s.queue[Decode]) / d.Seconds()
			v.Prefill.QueueGrowth = float64(prefillQueue-s.queue[Prefill]) / d.Seconds()
		}
		break
	}
	return v
}
